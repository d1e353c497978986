/**
 * Errors a JavaScript function throws or meets.
 *
 * `InvalidInput` and `Failed` are the function's own verdicts: thrown from `run`, they
 * become the protocol's `invalid-input` (HTTP 400 `invalid_input`) and `failed` (500
 * `function_failed`). `HostError` is a host call the host refused (a shape mismatch, a
 * missing artifact, a full quota): its `code` is the WIT `error-code` (`ErrorCode`);
 * uncaught, it fails the invocation like `Failed`. Any other exception fails it too,
 * with its name and message.
 *
 * @module sluice-guest/errors
 */

/** The request's inputs are wrong (missing, wrong datatype or shape): the caller's fault. */
export class InvalidInput extends Error {
  constructor(message) {
    super(message);
    this.name = 'InvalidInput';
  }
}

/** The function failed for a reason of its own. */
export class Failed extends Error {
  constructor(message) {
    super(message);
    this.name = 'Failed';
  }
}

/** A host call was refused; `code` says why (one of `ErrorCode`'s values). */
export class HostError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = 'HostError';
    this.code = code;
    this.hostMessage = message;
  }
}

/**
 * The WIT `error-code`s, as the bindings spell them (`HostError.code` is one of these).
 * Stable: codes are never renumbered or renamed.
 */
export const ErrorCode = Object.freeze({
  SHAPE_MISMATCH: 'shape-mismatch',
  DTYPE_MISMATCH: 'dtype-mismatch',
  INVALID_ARGUMENT: 'invalid-argument',
  NOT_FOUND: 'not-found',
  QUOTA_EXCEEDED: 'quota-exceeded',
  OUT_OF_MEMORY: 'out-of-memory',
  TOO_LARGE: 'too-large',
  DEVICE_FAILURE: 'device-failure',
  CANCELLED: 'cancelled',
});

/**
 * Runs a generated binding, turning the host's `error` record (thrown by the bindings
 * as an error whose `payload` is `{ code, message }`) into a `HostError`.
 */
export function hostCall(call, ...args) {
  try {
    return call(...args);
  } catch (e) {
    const payload = e !== null && typeof e === 'object' ? e.payload : undefined;
    if (payload !== undefined && typeof payload.code === 'string') {
      throw new HostError(payload.code, payload.message);
    }
    throw e;
  }
}
