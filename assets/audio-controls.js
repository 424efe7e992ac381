/**
 * The page's audio controls: the microphone toggle (`aria-pressed`) with its processing switches,
 * the level meter (`role="meter"`, 0–100), the "Assistant is speaking / quiet / stopped — you
 * interrupted" indicator, and resuming the assistant's audio after the browser suspended it (the
 * next click or key press anywhere does it).
 *
 * A microphone the user turned on is turned on again when a session opens after an automatic
 * reconnect; it stays off after the user's own Disconnect or a device that went away.
 *
 * @module audio-controls
 */

import { $ } from "./dom.js";
import { removeMessages, showError } from "./errors-view.js";

const els = {
  echo: $("echo-cancellation"),
  noise: $("noise-suppression"),
  gain: $("auto-gain"),
  mic: $("mic-button"),
  micText: document.querySelector("[data-testid=mic-button-text]"),
  meter: $("mic-level"),
  meterFill: $("mic-level-fill"),
  playback: $("playback-indicator"),
  playbackText: $("playback-text"),
};

/** The client whose audio these control (set by {@link mountAudioControls}). */
let client = null;
/** Set while a click anywhere is waiting to resume the assistant's audio. */
let resumeOnClick = false;
/** Whether the user has the microphone on: it is turned on again after an automatic reconnect. */
let micWanted = false;
let pendingLevel = 0;
let levelFrame = 0;

/**
 * Wire the audio controls to the client.
 * @param {import("./voxgate-client.js").VoxgateClient} voxgateClient
 * @returns {{forgetMicrophone: () => void}} `forgetMicrophone()`: the microphone is not to be
 *   turned on again by itself (a manual Connect starts afresh)
 */
export function mountAudioControls(voxgateClient) {
  client = voxgateClient;
  client.addEventListener("audio", (event) => {
    if (event.detail.state === "running") {
      removeMessages("audio_suspended");
      return;
    }
    if (resumeOnClick) return;
    resumeOnClick = true;
    // Browsers resume audio only from a user gesture: the next click or key press does it.
    const resume = () => {
      document.removeEventListener("pointerdown", resume, true);
      document.removeEventListener("keydown", resume, true);
      resumeOnClick = false;
      client.resumeAudio().catch(() => {
        showError({ source: "audio", code: "audio_resume_failed", message: "the assistant's audio could not be resumed" });
      });
    };
    document.addEventListener("pointerdown", resume, true);
    document.addEventListener("keydown", resume, true);
  });

  els.mic.addEventListener("click", () => {
    if (client.microphoneActive) {
      micWanted = false;
      client.stopMicrophone();
      return;
    }
    startMicrophone();
  });

  client.addEventListener("status", (event) => {
    const { state, byClient } = event.detail;
    if (state === "closed" && byClient) micWanted = false;
    if (state === "open" && micWanted && !client.microphoneActive) startMicrophone();
  });

  client.addEventListener("error", (event) => {
    // The device went away: it is not turned on again by itself.
    if (event.detail.code === "microphone_ended") micWanted = false;
  });

  client.addEventListener("microphone", (event) => {
    const active = event.detail.active;
    els.mic.setAttribute("aria-pressed", String(active));
    els.mic.dataset.active = String(active);
    els.micText.textContent = active ? "Stop microphone" : "Start microphone";
  });

  client.addEventListener("level", (event) => {
    pendingLevel = event.detail.level;
    if (!levelFrame) levelFrame = requestAnimationFrame(drawLevel);
  });

  client.addEventListener("playback", (event) => {
    const { state } = event.detail;
    els.playback.dataset.state = state === "started" ? "speaking" : state;
    els.playbackText.textContent = state === "started" ? "Assistant is speaking"
      : state === "interrupted" ? "Assistant stopped — you interrupted" : "Assistant is quiet";
  });
  return {
    forgetMicrophone() {
      micWanted = false;
    },
  };
}

async function startMicrophone() {
  els.mic.disabled = true;
  try {
    await client.startMicrophone({
      echoCancellation: els.echo.checked,
      noiseSuppression: els.noise.checked,
      autoGainControl: els.gain.checked,
    });
    micWanted = true;
  } catch {
    // Reported through the `error` event.
    micWanted = false;
  } finally {
    els.mic.disabled = !client.connected;
  }
}

function drawLevel() {
  levelFrame = 0;
  const percent = Math.round(pendingLevel * 100);
  els.meterFill.style.width = `${percent}%`;
  els.meter.setAttribute("aria-valuenow", String(percent));
  els.meter.dataset.level = String(pendingLevel.toFixed(3));
  if (percent > 0) els.meter.dataset.peak = String(Math.max(Number(els.meter.dataset.peak || 0), percent));
}
