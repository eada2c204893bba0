// The 64-bit integer rule of both SDKs (docs/sdk-cli.md "64-bit integers"): the wire carries
// 64-bit integers as decimal strings (the contract); records the SDK returns keep them as
// those strings, unchanged (lossless, and the same type in both SDKs); SDK arguments that are
// 64-bit take a number (a safe integer), a bigint or a decimal string and send a decimal
// string. `int64()` reads one back exactly, as a bigint.

const DECIMAL = /^-?\d{1,20}$/;
const MIN = -(2n ** 63n);
const MAX = 2n ** 64n - 1n;

/** A wire 64-bit integer (a decimal string, or a JSON number) as a bigint; undefined when it is not one. */
export function int64(value: unknown): bigint | undefined {
  let parsed: bigint;
  if (typeof value === "bigint") parsed = value;
  else if (typeof value === "number" && Number.isSafeInteger(value)) parsed = BigInt(value);
  else if (typeof value === "string" && DECIMAL.test(value)) parsed = BigInt(value);
  else return undefined;
  return parsed >= MIN && parsed <= MAX ? parsed : undefined;
}

/**
 * An SDK argument as the wire's decimal string: a string is sent as it is (the server judges
 * it, answering `invalid_argument`), a number must be a safe integer, a bigint fit 64 bits.
 */
export function wireInt64(value: string | number | bigint): string {
  if (typeof value === "string") return value;
  const parsed = int64(value);
  if (parsed === undefined) throw new RangeError(`not a 64-bit integer: ${String(value)}`);
  return parsed.toString();
}

/** A 64-bit argument as SDK methods take it. */
export type Int64Input = string | number | bigint;
