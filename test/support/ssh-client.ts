// The stock OpenSSH client's arguments for a test login: no config file, no host key kept, a
// password (from SSH_ASKPASS) as the only method, one prompt. Used by every SSH test.

/** `ssh` arguments for `destination` (`user@host`) on `port`, `extra` options before it. */
export function stockSshArgs(port: number, destination: string, extra: readonly string[] = []): string[] {
  return [
    "-F",
    "/dev/null",
    "-p",
    String(port),
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "PubkeyAuthentication=no",
    "-o",
    "PreferredAuthentications=password",
    "-o",
    "NumberOfPasswordPrompts=1",
    ...extra,
    destination,
  ];
}
