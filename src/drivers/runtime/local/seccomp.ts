// A seccomp filter in the spirit of Docker's default profile, written as a deny-list: what a
// process without CAP_SYS_ADMIN has no business calling (namespaces and user namespaces,
// mounts, keyrings, modules, kexec, bpf, perf, io_uring, clock and swap changes). Docker's
// profile is an allow-list of ~350 calls; a deny-list is shorter to audit here and keeps
// new harmless syscalls working. The capability set is the first wall; this is the second.
// Reaching into another process (ptrace, process_vm_*, pidfd_getfd, kcmp) is denied as Docker
// denies it without CAP_SYS_PTRACE: the exec agent's socket to the server lives in a process
// of the sandbox, and no process of the sandbox may take or read it.

const EPERM = 1;
const ENOSYS = 38;
const EAFNOSUPPORT = 97;
const CLONE_NEWUSER = 0x10000000;
/** Host-to-VM sockets: nothing in a sandbox talks to a hypervisor, and Docker's profile denies them. */
const AF_VSOCK = 40;

export const DENIED_SYSCALLS = [
  "acct",
  "add_key",
  "bpf",
  "clock_adjtime",
  "clock_settime",
  "create_module",
  "delete_module",
  "finit_module",
  "fsconfig",
  "fsmount",
  "fsopen",
  "fspick",
  "get_kernel_syms",
  "init_module",
  "io_uring_enter",
  "io_uring_register",
  "io_uring_setup",
  "ioperm",
  "iopl",
  "kcmp",
  "kexec_file_load",
  "kexec_load",
  "keyctl",
  "lookup_dcookie",
  "mount",
  "mount_setattr",
  "move_mount",
  "name_to_handle_at",
  "nfsservctl",
  "open_by_handle_at",
  "open_tree",
  "perf_event_open",
  "pidfd_getfd",
  "pivot_root",
  "process_vm_readv",
  "process_vm_writev",
  "ptrace",
  "quotactl",
  "quotactl_fd",
  "reboot",
  "request_key",
  "setns",
  "settimeofday",
  "stime",
  "swapoff",
  "swapon",
  "syslog",
  "umount",
  "umount2",
  "unshare",
  "uselib",
  "userfaultfd",
  "vhangup",
  "_sysctl",
];

export interface SeccompProfile {
  defaultAction: string;
  architectures: string[];
  syscalls: {
    names: string[];
    action: string;
    errnoRet?: number;
    args?: { index: number; value: number; valueTwo: number; op: string }[];
  }[];
}

const ARCHITECTURES: Record<string, string[]> = {
  x64: ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
  arm64: ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
};

/** The profile for runc's config.json (`linux.seccomp`), for the host's architecture (`process.arch`). */
export function seccompProfile(arch: string): SeccompProfile {
  return {
    defaultAction: "SCMP_ACT_ALLOW",
    architectures: ARCHITECTURES[arch] ?? [],
    syscalls: [
      { names: DENIED_SYSCALLS, action: "SCMP_ACT_ERRNO", errnoRet: EPERM },
      // clone3 passes its flags in memory, out of seccomp's reach: ENOSYS makes libc fall
      // back to clone, whose flags we can inspect (Docker does the same).
      { names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS },
      {
        names: ["clone"],
        action: "SCMP_ACT_ERRNO",
        errnoRet: EPERM,
        // x86 and arm pass the flags first. Other new namespaces already need CAP_SYS_ADMIN;
        // a new user namespace would grant it, so that one is refused here.
        args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: CLONE_NEWUSER, op: "SCMP_CMP_MASKED_EQ" }],
      },
      // As a kernel without vsock answers, so a probing program takes it for "not here".
      {
        names: ["socket", "socketpair"],
        action: "SCMP_ACT_ERRNO",
        errnoRet: EAFNOSUPPORT,
        args: [{ index: 0, value: AF_VSOCK, valueTwo: 0, op: "SCMP_CMP_EQ" }],
      },
    ],
  };
}
