//! A toy stand-in for server VAD: loudness in 20 ms frames decides when "speech" starts and stops,
//! so that microphone audio produces `input_audio_buffer.speech_started`/`speech_stopped`, automatic
//! commits and barge-in the way `turn_detection` does on the real service. It detects sound, not
//! speech: any tone or noise above the threshold counts.

use serde_json::Value;

use super::audio::{SAMPLE_RATE, rms};

/// Analysis frame: 20 ms of PCM16 mono at 24 kHz.
const FRAME_BYTES: usize = (SAMPLE_RATE as usize / 50) * 2;
const FRAME_MS: u64 = 20;
/// RMS above which a frame counts as sound (about -36 dBFS; room noise stays well below).
const SOUND_RMS: f64 = 500.0;

/// The session's `audio.input.turn_detection`, read for what the toy detector uses.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnDetection {
    pub silence_ms: u64,
    pub prefix_padding_ms: u64,
    pub create_response: bool,
    pub interrupt_response: bool,
}

impl TurnDetection {
    /// `None` when turn detection is off (`null`) or the input is not PCM16 (G.711 is not analysed).
    pub fn from_session(session: &Value) -> Option<Self> {
        let input = &session["audio"]["input"];
        let detection = input.get("turn_detection").filter(|d| d.is_object())?;
        if input["format"]["type"].as_str().is_some_and(|format| format != "audio/pcm") {
            return None;
        }
        // semantic_vad has no silence setting; its "auto" eagerness waits about this long.
        let silence_ms = detection["silence_duration_ms"].as_u64().unwrap_or(500);
        Some(Self {
            silence_ms,
            prefix_padding_ms: detection["prefix_padding_ms"].as_u64().unwrap_or(300),
            create_response: detection["create_response"].as_bool().unwrap_or(true),
            interrupt_response: detection["interrupt_response"].as_bool().unwrap_or(true),
        })
    }
}

/// What the detector noticed in appended audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VadEvent {
    Started { audio_start_ms: u64 },
    Stopped { audio_end_ms: u64 },
}

/// Detector state across appends. Times are on the session's audio clock (ms of audio received).
#[derive(Debug, Default)]
pub struct Vad {
    clock_ms: u64,
    speaking: bool,
    silence_run_ms: u64,
    /// Bytes short of a whole frame, kept for the next append.
    carry: Vec<u8>,
}

impl Vad {
    /// Feed appended PCM16 audio.
    pub fn feed(&mut self, pcm: &[u8], detection: &TurnDetection) -> Vec<VadEvent> {
        let mut found = Vec::new();
        self.carry.extend_from_slice(pcm);
        let whole = self.carry.len() - self.carry.len() % FRAME_BYTES;
        let frames: Vec<u8> = self.carry.drain(..whole).collect();
        for frame in frames.chunks_exact(FRAME_BYTES) {
            let loud = rms(frame) > SOUND_RMS;
            if !self.speaking && loud {
                self.speaking = true;
                self.silence_run_ms = 0;
                found.push(VadEvent::Started {
                    audio_start_ms: self.clock_ms.saturating_sub(detection.prefix_padding_ms),
                });
            } else if self.speaking && loud {
                self.silence_run_ms = 0;
            } else if self.speaking {
                self.silence_run_ms += FRAME_MS;
                if self.silence_run_ms >= detection.silence_ms {
                    self.speaking = false;
                    found.push(VadEvent::Stopped { audio_end_ms: self.clock_ms + FRAME_MS - self.silence_run_ms });
                }
            }
            self.clock_ms += FRAME_MS;
        }
        found
    }

    /// Forget a turn in progress (the buffer was cleared or committed by hand).
    pub fn reset(&mut self) {
        self.speaking = false;
        self.silence_run_ms = 0;
        self.carry.clear();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::audio::tone_chunk_pcm;
    use super::*;

    fn detection() -> TurnDetection {
        TurnDetection { silence_ms: 200, prefix_padding_ms: 100, create_response: true, interrupt_response: true }
    }

    #[test]
    fn tone_then_silence_starts_and_stops_a_turn() {
        let mut vad = Vad::default();
        let silence = vec![0u8; FRAME_BYTES * 10];
        assert!(vad.feed(&silence, &detection()).is_empty());
        let mut events = Vec::new();
        for index in 2..8 {
            events.extend(vad.feed(&tone_chunk_pcm(index, 10), &detection()));
        }
        assert_eq!(events, [VadEvent::Started { audio_start_ms: 100 }]);
        assert!(vad.speaking);
        let events = vad.feed(&silence, &detection());
        assert_eq!(events, [VadEvent::Stopped { audio_end_ms: 500 }]);
        assert!(!vad.speaking);
    }

    #[test]
    fn partial_frames_carry_over() {
        let mut vad = Vad::default();
        let tone = tone_chunk_pcm(5, 10);
        let (a, b) = tone.split_at(333);
        assert!(vad.feed(a, &detection()).is_empty());
        assert_eq!(vad.feed(b, &detection()).len(), 1);
    }

    #[test]
    fn settings_come_from_the_session() {
        let session = json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 700, "create_response": false}}}});
        let found = TurnDetection::from_session(&session).expect("on");
        assert_eq!(found.silence_ms, 700);
        assert!(!found.create_response && found.interrupt_response);
        let off = json!({"audio": {"input": {"turn_detection": null}}});
        assert_eq!(TurnDetection::from_session(&off), None);
        let ulaw = json!({"audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": {}}}});
        assert_eq!(TurnDetection::from_session(&ulaw), None);
    }
}
