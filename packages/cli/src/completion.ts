// `warren completion bash|zsh`: a completion script generated from the command tree itself,
// so it never drifts from the commands.
import type { Command } from "commander";

/** "path words" -> subcommands and options, for every command. */
function tree(command: Command, prefix: string[] = [], out = new Map<string, string[]>()): Map<string, string[]> {
  const words = [
    ...command.commands.flatMap((c) => [c.name(), ...c.aliases()]),
    ...command.options.flatMap((o) => [o.long, o.short].filter((x): x is string => Boolean(x))),
    "--help",
  ];
  out.set(prefix.join(" "), words);
  for (const sub of command.commands) {
    for (const name of [sub.name(), ...sub.aliases()]) tree(sub, [...prefix, name], out);
  }
  return out;
}

export function completionScript(program: Command, shell: "bash" | "zsh"): string {
  const cases = [...tree(program)].map(([path, words]) => `    "${path}") words="${words.join(" ")}" ;;`).join("\n");
  const body = `_warren_words() {
  # The command path so far: the non-option words before the current one.
  local path="" w
  for w in "$@"; do case "$w" in -*) ;; *) path="\${path:+$path }$w" ;; esac; done
  local words=""
  case "$path" in
${cases}
  esac
  echo "$words"
}
`;
  if (shell === "bash") {
    return `# bash completion for warren: source <(warren completion bash)
${body}_warren_complete() {
  local cur="\${COMP_WORDS[COMP_CWORD]}"
  COMPREPLY=( $(compgen -W "$(_warren_words "\${COMP_WORDS[@]:1:COMP_CWORD-1}")" -- "$cur") )
}
complete -o default -F _warren_complete warren
`;
  }
  return `#compdef warren
# zsh completion for warren: source <(warren completion zsh)
${body}_warren() {
  local -a candidates
  candidates=(\${=$(_warren_words "\${(@)words[2,CURRENT-1]}")})
  compadd -- $candidates
}
compdef _warren warren
`;
}
