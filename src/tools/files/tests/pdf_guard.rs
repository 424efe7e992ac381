//! The PDF stream guard: what it counts (every filter, all streams together, whatever a stream's
//! `/Length` says), dictionaries and keywords written to slip a decompression bomb past it while
//! lopdf still decodes it, and its cost on files with many streams.

use std::io::Write;
use std::time::Duration;

use crate::tools::files::pdf_guard::{PdfGuardError, check};

const BUDGET: u64 = 16 << 20;

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// `n` zeros in LZW as lopdf reads it by default (codes widen one entry early) or, without
/// `early_change`, as `/EarlyChange 0` tells it to.
fn lzw_zeros(n: usize, early_change: bool) -> Vec<u8> {
    let mut encoder = if early_change {
        weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
    } else {
        weezl::encode::Encoder::new(weezl::BitOrder::Msb, 8)
    };
    let mut lzw = Vec::new();
    encoder.into_stream(&mut lzw).encode_all(&vec![0u8; n][..]).status.unwrap();
    lzw
}

/// 64 MiB of zeros, deflated to ≈ 64 KiB.
fn bomb() -> Vec<u8> {
    zlib(&vec![0u8; 64 << 20])
}

/// One object: `head` (from the object number to the keyword's end of line), `data`, the end.
fn pdf(head: &str, data: &[u8]) -> Vec<u8> {
    let mut pdf = format!("%PDF-1.7\n{head}").into_bytes();
    pdf.extend_from_slice(data);
    pdf.extend_from_slice(b"\nendstream\nendobj\n%%EOF\n");
    pdf
}

fn refused(pdf: &[u8]) -> bool {
    check(pdf, BUDGET) == Err(PdfGuardError::TooLarge { limit: BUDGET })
}

/// ASCII85 as lopdf decodes it (`z` for a group of zeros), with its `~>` end marker.
fn ascii85(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for group in data.chunks(4) {
        let mut word = [0u8; 4];
        word[..group.len()].copy_from_slice(group);
        let mut value = u32::from_be_bytes(word);
        if value == 0 && group.len() == 4 {
            out.push(b'z');
            continue;
        }
        let mut digits = [0u8; 5];
        for digit in digits.iter_mut().rev() {
            *digit = (value % 85) as u8 + b'!';
            value /= 85;
        }
        out.extend_from_slice(&digits[..group.len() + 1]);
    }
    out.extend_from_slice(b"~>");
    out
}

#[test]
fn spaces_or_tabs_after_the_stream_keyword_do_not_hide_a_stream() {
    let bomb = bomb();
    assert!(refused(&pdf("1 0 obj\n<< /Filter /FlateDecode >>\nstream \t \r\n", &bomb)));
    assert!(refused(&pdf("1 0 obj\n<< /Filter /FlateDecode >>\nstream\t\n", &bomb)));
}

#[test]
fn escaped_names_are_read_as_lopdf_reads_them() {
    let bomb = bomb();
    assert!(refused(&pdf("1 0 obj\n<< /Filter /Fl#61teDecode >>\nstream\n", &bomb)));
    assert!(refused(&pdf("1 0 obj\n<< /Filt#65r /FlateDecode >>\nstream\n", &bomb)));
    assert!(refused(&pdf("1 0 obj\n<< /#46ilter [/#46lateDecode] >>\nstream\n", &bomb)));
}

#[test]
fn an_obj_inside_the_dictionary_does_not_cut_it_short() {
    let bomb = bomb();
    for head in [
        "1 0 obj\n<< /Filter /FlateDecode /X /obj >>\nstream\n",
        "1 0 obj\n<< /Filter /FlateDecode /Xobj << >> >>\nstream\n",
        "1 0 obj\n<< /Filter /FlateDecode /X (obj << >>) >>\nstream\n",
        // In lopdf's string `\(` is an escape; read from the `obj` on, a string's start.
        "1 0 obj\n<< /Filter /FlateDecode /X [(obj << /Y [\\(/Q) ] >>\nstream\n",
        // lopdf skips the comment: the `<<` after `%obj` is not a dictionary.
        "1 0 obj\n<< /Filter /FlateDecode %obj <<\n >>\nstream\n",
    ] {
        assert!(refused(&pdf(head, &bomb)), "{head}");
    }
    // LZW hidden the same way.
    let lzw = lzw_zeros(32 << 20, true);
    assert!(refused(&pdf("1 0 obj\n<< /Filter /LZWDecode %obj <<\n >>\nstream\n", &lzw)));
    // And a chain of two.
    let twice = zlib(&bomb);
    let head = "1 0 obj\n<< /Filter [/FlateDecode /FlateDecode] %obj <<\n >>\nstream\n";
    assert!(refused(&pdf(head, &twice)));
}

#[test]
fn only_the_dictionarys_own_filter_key_counts() {
    let bomb = bomb();
    for head in [
        // The first `/Filter` in the text is a value, or a key of a nested dictionary.
        "1 0 obj\n<< /A /Filter /Filter /FlateDecode >>\nstream\n",
        "1 0 obj\n<< /DecodeParms << /Filter /None >> /Filter /FlateDecode >>\nstream\n",
        // lopdf keeps the last of two keys.
        "1 0 obj\n<< /Filter /None /Filter /FlateDecode >>\nstream\n",
        // A dictionary longer than the guard reads back.
        &format!("1 0 obj\n<< /Filter /FlateDecode /Pad [{}] >>\nstream\n", "0 ".repeat(64 << 10)),
    ] {
        assert!(refused(&pdf(head, &bomb)), "{}", &head[..head.len().min(80)]);
    }
}

#[test]
fn a_flate_stream_wrapped_in_ascii85_is_decoded() {
    let data = ascii85(&bomb());
    assert!(refused(&pdf("1 0 obj\n<< /Filter [/ASCII85Decode /FlateDecode] >>\nstream\n", &data)));
    assert_eq!(check(&pdf("1 0 obj\n<< /Filter [/ASCII85Decode /FlateDecode] >>\nstream\n", &data), 128 << 20), Ok(()));
}

#[test]
fn ordinary_dictionaries_are_read_and_pass() {
    let content = zlib(b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET");
    for head in [
        "1 0 obj\n<< /Length 5 0 R /Filter /FlateDecode >>\nstream\r\n",
        "1 0 obj<</Filter[/FlateDecode]/DecodeParms[<</Predictor 12/Columns 5>>]/Length 40>>stream\n",
        "1 0 obj\n<< /Type /EmbeddedFile /Params << /ModDate (D:2024\\) obj) /CheckSum <0A1b> >> /Filter /FlateDecode >>\nstream\n",
    ] {
        assert_eq!(check(&pdf(head, &content), 1 << 20), Ok(()), "{head}");
    }
    // Raw image data whose dictionary is read with certainty is not decoded.
    let jpeg = [&[0xff, 0xd8, 0xff][..], &vec![0x5a; 1 << 20]].concat();
    assert_eq!(check(&pdf("1 0 obj\n<< /Filter /DCTDecode >>\nstream\n", &jpeg), 1 << 10), Ok(()));
}

#[test]
fn many_small_streams_are_checked_in_linear_time() {
    // 20,000 small Flate streams, then 8 MiB of padding: each stream is decoded from where it
    // starts, never by copying the rest of the file.
    let content = zlib(b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET");
    let mut file = b"%PDF-1.7\n".to_vec();
    for n in 1..=20_000 {
        file.extend_from_slice(format!("{n} 0 obj\n<< /Length {} /Filter /FlateDecode >>\nstream\n", content.len()).as_bytes());
        file.extend_from_slice(&content);
        file.extend_from_slice(b"\nendstream\nendobj\n");
    }
    file.extend_from_slice(&vec![b' '; 8 << 20]);
    file.extend_from_slice(b"%%EOF\n");
    let (done, result) = std::sync::mpsc::channel();
    // On a thread, so that a slow check fails the test instead of holding it.
    std::thread::spawn(move || done.send(check(&file, 64 << 20)));
    assert_eq!(result.recv_timeout(Duration::from_secs(2)), Ok(Ok(())));
}

/// What the guard counts, on plainly written PDFs.
mod basics {
    use std::io::Write;

    use super::zlib;
    use crate::tools::files::pdf_guard::{PdfGuardError, check, find};

    fn pdf_with_stream(dictionary: &str, data: &[u8]) -> Vec<u8> {
        let mut pdf = format!("%PDF-1.7\n1 0 obj\n<< {dictionary} /Length {} >>\nstream\n", data.len()).into_bytes();
        pdf.extend_from_slice(data);
        pdf.extend_from_slice(b"\nendstream\nendobj\n%%EOF\n");
        pdf
    }

    #[test]
    fn a_stream_that_inflates_past_the_budget_is_refused() {
        // 64 MiB of zeros deflate to ≈ 64 KiB.
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let pdf = pdf_with_stream("/Filter /FlateDecode", &bomb);
        assert_eq!(check(&pdf, 16 << 20), Err(PdfGuardError::TooLarge { limit: 16 << 20 }));
        assert_eq!(check(&pdf, 128 << 20), Ok(()));
    }

    #[test]
    fn a_double_filter_is_decoded_step_by_step() {
        let inner = zlib(&vec![0u8; 64 << 20]);
        let twice = zlib(&inner);
        let pdf = pdf_with_stream("/Filter [/FlateDecode /FlateDecode]", &twice);
        assert!(check(&pdf, 16 << 20).is_err());
        assert_eq!(check(&pdf, 128 << 20), Ok(()));
    }

    #[test]
    fn the_budget_is_for_all_streams_together() {
        let one = pdf_with_stream("/Filter /FlateDecode", &zlib(&vec![b'a'; 6 << 20]));
        let mut three = one.clone();
        three.extend_from_slice(&one[9..]);
        three.extend_from_slice(&one[9..]);
        assert_eq!(check(&one, 16 << 20), Ok(()));
        assert!(check(&three, 16 << 20).is_err());
    }

    #[test]
    fn a_stream_is_counted_whatever_its_length_or_endstream_say() {
        // A lying /Length, and `endstream` early in the data (deflate's stored blocks carry it
        // as it is): the decoder reads to its own end.
        let mut plain = b"endstream".to_vec();
        plain.resize(20 << 20, 0);
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::none());
        encoder.write_all(&plain).unwrap();
        let data = encoder.finish().unwrap();
        assert!(find(&data, b"endstream").is_some_and(|at| at < 16));
        let pdf = pdf_with_stream("/Filter/FlateDecode /Length 3", &data);
        assert!(check(&pdf, 16 << 20).is_err());
        // An unreadable filter is taken as Flate.
        let pdf = pdf_with_stream("/Filter 5 0 R", &zlib(&vec![0u8; 64 << 20]));
        assert!(check(&pdf, 16 << 20).is_err());
    }

    #[test]
    fn lzw_and_ascii85_are_counted_too() {
        let lzw = super::lzw_zeros(32 << 20, true);
        assert!(check(&pdf_with_stream("/Filter /LZWDecode", &lzw), 16 << 20).is_err());
        assert_eq!(check(&pdf_with_stream("/Filter /LZWDecode", &lzw), 64 << 20), Ok(()));
        let zs = vec![b'z'; 5 << 20];
        assert!(check(&pdf_with_stream("/Filter /ASCII85Decode", &zs), 16 << 20).is_err());
    }

    #[test]
    fn ordinary_streams_and_uncompressed_ones_pass() {
        let text = b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET";
        assert_eq!(check(&pdf_with_stream("/Filter /FlateDecode", &zlib(text)), 1 << 20), Ok(()));
        assert_eq!(check(&pdf_with_stream("", text), 1 << 20), Ok(()));
        assert_eq!(check(&pdf_with_stream("/Filter /DCTDecode", &[0xff, 0xd8, 0xff]), 1 << 20), Ok(()));
        assert_eq!(check(b"%PDF-1.7\nno streams here\n%%EOF", 1 << 20), Ok(()));
    }
}

/// `/a\(`: to lopdf the `\(` is an escape inside a string that began before the guard's `obj`.
#[test]
fn a_backslash_in_a_name_makes_the_dictionary_unsure() {
    assert!(refused(&pdf("1 0 obj\n<< /Filter /FlateDecode /S (obj << /a\\( ) >>\nstream\n", &bomb())));
}

fn stored(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::none());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn an_unreadable_dictionary_does_not_hide_more_layers_than_the_guard_guesses() {
    let head = "1 0 obj\n<< /Filter [/FlateDecode /FlateDecode /FlateDecode /FlateDecode] %c\n >>\nstream\n";
    assert!(refused(&pdf(head, &zlib(&zlib(&zlib(&bomb()))))));
    // Wrappers that do not compress at all, around a small two-layer bomb.
    let mut data = zlib(&bomb());
    for _ in 0..6 {
        data = stored(&data);
    }
    assert!(refused(&pdf(head, &data)));
}

#[test]
fn ordinary_streams_with_an_unreadable_dictionary_pass() {
    // A content stream without `w`, `x`, `y` or `z` decodes as ASCII85 too, to bytes no filter reads.
    let content: String = (0..200).map(|n| format!("BT /F1 12 Tf 72 {n} Td (Hello) Tj ET\n")).collect();
    let flate = zlib(content.as_bytes());
    for (head, data) in [
        ("1 0 obj\n<< /Filter /FlateDecode %c\n >>\nstream\n", flate.clone()),
        ("1 0 obj\n<< /Filter [/ASCII85Decode /FlateDecode] %c\n >>\nstream\n", ascii85(&flate)),
        ("1 0 obj\n<< /Filter /FlateDecode /Length 5 0 R /X (obj) >>\nstream\n", flate.clone()),
    ] {
        assert_eq!(check(&pdf(head, &data), 1 << 20), Ok(()), "{head}");
    }
}

/// LZW written without early change, as `/EarlyChange 0` tells lopdf to read it.
#[test]
fn lzw_without_early_change_is_counted() {
    let lzw = lzw_zeros(32 << 20, false);
    for head in [
        "1 0 obj\n<< /Filter /LZWDecode /DecodeParms << /EarlyChange 0 >> >>\nstream\n",
        "1 0 obj\n<< /DecodeParms << /EarlyChange -0 /Predictor 1 >> /Filter [/LZWDecode] >>\nstream\n",
        "1 0 obj\n<< /Filter /LZWDecode /DecodeParms << /EarlyChange 0 >> %c\n >>\nstream\n",
    ] {
        assert!(refused(&pdf(head, &lzw)), "{head}");
    }
    assert_eq!(check(&pdf("1 0 obj\n<< /Filter /LZWDecode /DecodeParms << /EarlyChange 0 >> >>\nstream\n", &lzw), 64 << 20), Ok(()));
}

/// Zeros in a stream whose dictionary cannot be read (black image rows, padding) are not a chain
/// of layers: LZW keeps most of them, and followed down they ran into the layer limit.
#[test]
fn zeros_in_an_unsure_stream_pass() {
    let head = "1 0 obj\n<< /Filter /FlateDecode %c\n >>\nstream\n";
    assert_eq!(check(&pdf(head, &zlib(&[0u8; 4096])), 1 << 20), Ok(()));
    assert_eq!(check(&pdf(head, &[0u8; 4096]), 1 << 20), Ok(()));
}
