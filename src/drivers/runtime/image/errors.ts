// The one error type of the image layer. A stable code lets the runtime driver map a pull
// failure to an API error (a bad reference is the caller's fault, a digest mismatch is not).

export type ImageErrorCode =
  | "invalid_reference"
  | "not_found"
  | "unauthorized"
  | "digest_mismatch"
  | "unsupported"
  | "unsafe_layer"
  | "registry_error";

export class ImageError extends Error {
  readonly code: ImageErrorCode;

  constructor(code: ImageErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ImageError";
    this.code = code;
  }
}
