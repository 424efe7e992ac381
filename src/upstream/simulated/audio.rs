//! The simulated model's voice and ears: a soft synthetic tone standing in for speech (PCM16 LE,
//! 24 kHz mono, the GA default `audio/pcm` format) and a loudness measure for the toy voice detector.
//! Nothing here understands or produces language; it only makes the wire traffic realistic.

use std::f64::consts::TAU;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Samples per second of `audio/pcm` in the Realtime API (the only rate it accepts).
pub const SAMPLE_RATE: u32 = 24_000;

/// Length of one `response.output_audio.delta`, in milliseconds: within the 20–100 ms real servers use.
pub const CHUNK_MS: u32 = 50;

/// Speaking-rate estimate: about 14 characters per second, a calm conversational pace.
const MS_PER_CHAR: u32 = 70;
/// Bounds on one spoken answer, so that a long echo never turns into a long stream of audio.
const MIN_SPEECH_MS: u32 = 400;
const MAX_SPEECH_MS: u32 = 6_000;

/// Peak amplitude of the tone, about -20 dBFS: audible but soft.
const TONE_AMPLITUDE: f64 = 3_300.0;
/// Carrier frequency of the tone, near a speaking voice's fundamental.
const TONE_HZ: f64 = 200.0;
/// Syllable-like loudness modulation, so the tone pulses the way speech does.
const SYLLABLE_HZ: f64 = 4.0;
/// Fade at both ends of an answer, so it starts and stops without a click.
const FADE_MS: f64 = 30.0;

/// How long speaking `text` would take, clamped to a modest range.
pub fn speech_duration_ms(text: &str) -> u32 {
    let chars = u32::try_from(text.chars().count()).unwrap_or(u32::MAX);
    chars.saturating_mul(MS_PER_CHAR).clamp(MIN_SPEECH_MS, MAX_SPEECH_MS)
}

/// Number of [`CHUNK_MS`] chunks needed for `duration_ms` of audio (at least one).
pub fn chunk_count(duration_ms: u32) -> usize {
    usize::try_from(duration_ms.div_ceil(CHUNK_MS)).unwrap_or(1).max(1)
}

/// The tone's audio for chunk `index` of an answer lasting `total_chunks` chunks, as base64 of
/// PCM16 LE. Chunks are generated on demand so a long answer never sits in memory whole.
pub fn tone_chunk_base64(index: usize, total_chunks: usize) -> String {
    STANDARD.encode(tone_chunk_pcm(index, total_chunks))
}

/// Raw PCM16 LE bytes of one chunk; see [`tone_chunk_base64`].
pub fn tone_chunk_pcm(index: usize, total_chunks: usize) -> Vec<u8> {
    let samples_per_chunk = (SAMPLE_RATE * CHUNK_MS / 1000) as usize;
    let total_samples = (samples_per_chunk * total_chunks.max(1)) as f64;
    let fade_samples = FADE_MS * f64::from(SAMPLE_RATE) / 1000.0;
    let first = index * samples_per_chunk;
    let mut bytes = Vec::with_capacity(samples_per_chunk * 2);
    for n in first..first + samples_per_chunk {
        let n = n as f64;
        let t = n / f64::from(SAMPLE_RATE);
        let fade = (n / fade_samples).min((total_samples - n) / fade_samples).clamp(0.0, 1.0);
        let syllables = 0.6 + 0.4 * (TAU * SYLLABLE_HZ * t).sin();
        let value = TONE_AMPLITUDE * fade * syllables * (TAU * TONE_HZ * t).sin();
        // In range by construction (|value| <= TONE_AMPLITUDE), so the cast cannot saturate.
        bytes.extend_from_slice(&(value.round() as i16).to_le_bytes());
    }
    bytes
}

/// Root-mean-square level of PCM16 LE samples (0 for no samples). A trailing odd byte is ignored.
pub fn rms(pcm: &[u8]) -> f64 {
    let samples = pcm.chunks_exact(2).map(|pair| f64::from(i16::from_le_bytes([pair[0], pair[1]])));
    let (count, sum) = samples.fold((0u64, 0.0), |(count, sum), s| (count + 1, sum + s * s));
    if count == 0 { 0.0 } else { (sum / count as f64).sqrt() }
}

/// Decode one `input_audio_buffer.append` payload; `None` when it is not valid base64.
pub fn decode_base64(audio: &str) -> Option<Vec<u8>> {
    STANDARD.decode(audio).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_follows_text_length_within_bounds() {
        assert_eq!(speech_duration_ms(""), MIN_SPEECH_MS);
        assert_eq!(speech_duration_ms(&"a".repeat(20)), 1_400);
        assert_eq!(speech_duration_ms(&"a".repeat(10_000)), MAX_SPEECH_MS);
    }

    #[test]
    fn chunks_are_fifty_ms_of_audible_pcm16() {
        let chunks = chunk_count(1_400);
        assert_eq!(chunks, 28);
        let middle = tone_chunk_pcm(chunks / 2, chunks);
        assert_eq!(middle.len(), 2 * 24_000 * 50 / 1000);
        assert!(rms(&middle) > 500.0, "audible even at a syllable trough: {}", rms(&middle));
        assert!(rms(&middle) < 4_000.0, "and not loud");
    }

    #[test]
    fn answer_fades_in_from_silence() {
        let first = tone_chunk_pcm(0, 10);
        let opening = i16::from_le_bytes([first[0], first[1]]);
        assert_eq!(opening, 0, "no click at the start");
    }

    #[test]
    fn base64_round_trip_and_rms_of_silence() {
        let encoded = tone_chunk_base64(3, 10);
        let decoded = decode_base64(&encoded).expect("valid base64");
        assert_eq!(decoded, tone_chunk_pcm(3, 10));
        assert_eq!(rms(&[0u8; 960]), 0.0);
        assert_eq!(rms(&[]), 0.0);
        assert!(decode_base64("not base64!").is_none());
    }
}
