/**
 * Streaming output: chunks sent to the caller while the function runs (a generation's
 * tokens, one chunk each), and whether the caller is still there.
 *
 *     import { IoTensor, streaming } from 'sluice-guest';
 *
 *     for (const piece of pieces) {
 *       if (streaming.callerGone()) break;
 *       streaming.emit([IoTensor.text('text_output', [piece])]);
 *     }
 *
 * A one-shot caller gets no chunks (`emit` drops them), so a streaming function returns
 * its whole result from `run` as well. Once the caller has gone (closed its connection),
 * `emit` and every host call that can fail throw `HostError` with code
 * `ErrorCode.CANCELLED`: let it propagate, and the host frees the invocation's memory.
 *
 * @module sluice-guest/streaming
 */

import * as wit from 'sluice:gpu/streaming@1.2.0';

import { hostCall } from './errors.js';

/** Sends `chunk` (named outputs, `IoTensor`s) to a streaming caller now; throws
 * `HostError` (`cancelled`) once the caller has gone. */
export function emit(chunk) {
  hostCall(wit.emit, chunk.map((t) => t.toWit()));
}

/** Whether the caller has gone: stop early (its result would not be read). */
export function callerGone() {
  return wit.callerGone();
}
