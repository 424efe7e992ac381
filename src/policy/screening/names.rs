//! Names in the text: a title ("Mr", "Dr.", "Frau") or "patient" before a word that reads as a
//! name. What counts as one, and what is left as a clinical abbreviation ("MR imaging", "MS
//! relapse", "Mx CAP"), is decided word by word against the medical and common word lists.

use std::sync::LazyLock;

use regex::Regex;

use super::{COMMON_WORDS, MEDICAL_WORDS, STOP_WORDS, known, normalise};

/// "patient"/"pt" followed by a capitalised word: a name unless the word is medical vocabulary or
/// a function word ("Patient Safety Outcomes", "Patient With Diabetes" pass), apostrophes and
/// hyphens included ("patient O'Brien"); or by an upper-case word (`patient SMITH`; see
/// [`named_patient`]).
pub(super) static AFTER_PATIENT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\b((?i:patient|pt))\b[:,.]?\s+(\p{Lu}[\p{L}'’-]*)\b").ok());

/// A title ("Mr", "dr.", "MRS"), its period or space, any initials, any name particles ("de",
/// "van der"), and the word after them: a name or not is decided by [`titled_name`].
pub(super) static AFTER_TITLE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\b((?i:mrs|mr|ms|mx|miss|dr|prof|herr|frau|doctor|mister))(\.\s*|\s+)((?:\p{Lu}(?:\.\s*|\s+))*)((?:(?:de|da|di|du|del|dos|van|von|der|den|ten|ter|zu|le|la)\s+)*)(\p{L}[\p{L}'’-]*\p{L})\b").ok()
});

/// A name after a title. "MR", "MS", "DR", "MRS" and "Mx" are also MR imaging, mitral
/// regurgitation, multiple sclerosis, diabetic retinopathy, MR spectroscopy and "management", so
/// how sure the title is decides what may follow it:
/// - written as a title ("Mr", "Dr", "Frau", and "HERR", "FRAU", "PROF", no abbreviation in upper
///   case either; not "Mx", as often management: "Mx CAP"): any capitalised word is a name ("Mr.
///   Smith", "Dr. O'Brien"); an upper-case word is one unless it is medical ("Mr. SMITH"); a
///   lower-case one only if it is not common vocabulary ("Mr quixote", not "Miss rate");
/// - any case with a period or initials ("MR. SMITH", "mr. smith", "dr J. Quixote", "Mx. Smith"):
///   any word but medical vocabulary ("DR. Screening" passes). After an upper-case title or "Mx"
///   an initial needs its period ("MS B cell", "MR T staging" are words), and after "MS", "MR" or
///   "MX" a period then a capitalised word that is not common English ends a sentence ("in MS.
///   Natalizumab risk"; "MS. Lee", "DR. Patel", "PROF. Müller" are names);
/// - "Mx" before a word written as a name, unless the word is medical ("Mx Smith", "Mx O'Brien",
///   "Mx McDonald"; "Mx HFpEF" passes);
/// - a lower-case title before a capitalised word ("mr Smith"), unless the word is medical;
/// - "Doctor", "Mister" in any case before a capitalised word, unless the word is medical.
///
/// "MR SMITH", "mr smith" and "MS Relapse" are not read as names: nothing tells them from "MR
/// IMAGING", "mr imaging" or "MR Angiography". Milliseconds ("500 ms") are no title, "Ms" after a
/// number is ("Bed 3 Ms Lee"); nor is lower-case "miss" before a lower-case word ("miss rate";
/// "miss Smith" is). Name particles are skipped before a capital: "Dr de Silva" is judged as "Dr
/// Silva".
pub(super) fn titled_name(text: &str) -> bool {
    let Some(pattern) = AFTER_TITLE.as_ref() else { return true };
    // A rejected match may have taken the next title as its word ("severe MR Mr. Smith"): look
    // again from the end of its title, so that title is read too.
    let mut from = 0;
    while let Some(caps) = pattern.captures_at(text, from) {
        let Some(title) = caps.get(1) else { return true };
        if is_titled_name(text, &caps) {
            return true;
        }
        from = title.end();
    }
    false
}

/// One match of [`AFTER_TITLE`]: is it a name (the rules at [`titled_name`])?
fn is_titled_name(text: &str, caps: &regex::Captures<'_>) -> bool {
    let (Some(whole), Some(title), Some(name)) = (caps.get(0), caps.get(1), caps.get(5)) else { return false };
    let title = title.as_str();
    let after_number = text[..whole.start()].trim_end().ends_with(|c: char| c.is_ascii_digit());
    let lower_title = title.chars().all(char::is_lowercase);
    let initials = caps.get(3).map_or("", |m| m.as_str());
    let name = name.as_str();
    let capital = name.chars().next().is_some_and(char::is_uppercase);
    // A particle is skipped only before a capital ("Dr de Silva"; "Dr de novo" is no name), and
    // lower-case "miss" is a verb only before a lower-case word ("miss rate"; "miss Smith" is not).
    let particles = caps.get(4).is_some_and(|m| !m.as_str().is_empty());
    if (after_number && title == "ms")
        || (lower_title && title == "miss" && initials.is_empty() && !capital)
        || (particles && !capital)
    {
        return false;
    }
    // Upper-case German titles and "PROF" are no clinical abbreviation: as sure as "Herr", "Prof".
    let usual = (title != "Mx"
        && title.chars().next().is_some_and(char::is_uppercase)
        && title.chars().skip(1).all(char::is_lowercase))
        || matches!(title, "HERR" | "FRAU" | "PROF");
    let period = caps.get(2).is_some_and(|m| m.as_str().contains('.'));
    let capitalised = capital && name.chars().any(char::is_lowercase);
    let word = normalise(name);
    let medical = medical(&word);
    if title.eq_ignore_ascii_case("doctor") || title.eq_ignore_ascii_case("mister") {
        // Spelled out, a title is also a noun ("doctor shopping", "Doctor Patient communication").
        return capitalised && !medical;
    }
    let initialled = if usual || lower_title { !initials.is_empty() } else { initials.contains('.') };
    // Only after a title that is also a clinical abbreviation, and only before a word that is not
    // common English: surnames mostly are ("MS. Lee", "MR. Smith"), drug names are not.
    let sentence_end = matches!(title, "MS" | "MR" | "MX")
        && period
        && initials.is_empty()
        && capitalised
        && !word.split('-').any(|part| known(&COMMON_WORDS, part));
    let marked = (period && !sentence_end) || initialled;
    // "Mx" is management as often as a title: a Title-case word after it is a name unless medical
    // ("Mx Smith", "Mx McDonald", "Mx O'Brien"; "Mx HFpEF", "Mx CAP", "Mx croup" pass, eponyms
    // "Mx Graves disease" do not).
    if title == "Mx" && reads_as_name(name) && !medical {
        return true;
    }
    if usual && capitalised {
        true
    } else if usual && !capital && !marked {
        !(medical || known(&COMMON_WORDS, &word))
    } else if usual || marked {
        !medical
    } else {
        lower_title && capitalised && !medical
    }
}

/// "patient Quixote", "pt: Smith": a capitalised non-medical word right after "patient". An
/// upper-case word after "patient" not itself in capitals is a name when it is common English but
/// not medical ("patient SMITH"; surnames mostly are common words, acronyms are not: "patient HIV
/// status", "patient COPD outcomes" pass, and so does "PATIENT SAFETY").
pub(super) fn named_patient(text: &str) -> bool {
    let Some(pattern) = AFTER_PATIENT.as_ref() else { return true };
    pattern.captures_iter(text).any(|caps| {
        let (Some(patient), Some(name)) = (caps.get(1), caps.get(2)) else { return true };
        let name = name.as_str().trim_end_matches(['\'', '’', '-']);
        let word = normalise(name);
        let medical = medical(&word);
        if name.chars().any(char::is_lowercase) {
            // Mixed case that is no name's ("HFpEF", "HbA1c") is an abbreviation.
            reads_as_name(name) && !medical
        } else {
            // Two capitals are an abbreviation ("patient GP registration").
            name.chars().count() >= 3
                && !medical
                && !patient.as_str().chars().all(char::is_uppercase)
                && known(&COMMON_WORDS, &word)
        }
    })
}

/// Medical vocabulary or a function word; a compound when each part is ("non-invasive").
fn medical(word: &str) -> bool {
    known(&MEDICAL_WORDS, word)
        || STOP_WORDS.contains(&word)
        || (word.contains('-') && word.split('-').all(|part| known(&MEDICAL_WORDS, part)))
}

/// Written as a name: each part between apostrophes and hyphens a capital and then no capital,
/// after a "Mc" or "Mac" ("Smith", "O'Brien", "McDonald", "Smith-Jones", "Bell's"; not "HFpEF" or
/// "CAP").
fn reads_as_name(name: &str) -> bool {
    let name = name.strip_suffix("'s").or_else(|| name.strip_suffix("’s")).unwrap_or(name);
    name.split(['\'', '’', '-']).filter(|part| !part.is_empty()).all(|part| {
        let part = ["Mac", "Mc"]
            .iter()
            .find_map(|prefix| part.strip_prefix(prefix).filter(|rest| rest.starts_with(char::is_uppercase)))
            .unwrap_or(part);
        part.starts_with(char::is_uppercase) && part.chars().skip(1).all(|c| !c.is_uppercase())
    })
}
