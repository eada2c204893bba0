// node:crypto as the SDK uses it, from Web Crypto (getRandomValues works outside secure contexts too).
export function randomBytes(size: number): Uint8Array & { toString(encoding?: string): string } {
  const bytes = crypto.getRandomValues(new Uint8Array(size));
  return Object.assign(bytes, {
    toString(encoding?: string) {
      if (encoding === "base64url") {
        return btoa(String.fromCharCode(...bytes))
          .replace(/\+/g, "-")
          .replace(/\//g, "_")
          .replace(/=+$/, "");
      }
      return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
    },
  });
}

export function randomUUID(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = ((b[6] as number) & 0x0f) | 0x40;
  b[8] = ((b[8] as number) & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export function createHash(): never {
  throw new Error("hashing files is not available in the console");
}
