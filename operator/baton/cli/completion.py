"""`kubectl baton completion bash|zsh`: a shell completion script made from the plugin's own
argparse parser, so that it names every verb and flag there is (no second list to keep).

Pure: a parser in, the script's text out. The script completes verbs, flags, -o's formats, and
asks kubectl (at completion time, in the user's shell) for namespaces and toolruntime names.
"""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh")


def _subparsers(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in top._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(sub: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """The verb's flags, and those of them that take a value."""
    flags: list[str] = []
    valued: list[str] = []
    for action in sub._actions:
        flags += action.option_strings
        if action.option_strings and action.nargs != 0:
            valued += action.option_strings
    return flags, valued


def script(top: argparse.ArgumentParser, *, shell: str) -> str:
    subs = _subparsers(top)
    cases = []
    for verb, sub in subs.items():
        flags, valued = _flags(sub)
        named = any(not a.option_strings and a.dest == "name" for a in sub._actions)
        cases.append(f"    {verb}) flags='{' '.join(flags)}'; valued=' {' '.join(valued)} '; named={int(named)} ;;")
    body = "\n".join(cases)
    skip = sorted({f for sub in subs.values() for f in _flags(sub)[1]} - {"-n", "--namespace"})
    text = f"""# {shell} completion for kubectl-baton (`kubectl baton`), from `kubectl baton completion {shell}`.
# Load it in this shell: source <(kubectl baton completion {shell})
_kubectl_baton() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} verb="" i=1 flags valued named ns="" positional=0
  COMPREPLY=()
  # The words before the cursor: the verb, the namespace, and how many positionals are given.
  while [ "$i" -lt "$COMP_CWORD" ]; do
    case ${{COMP_WORDS[i]}} in
      -n|--namespace) ns=${{COMP_WORDS[i+1]}}; i=$((i+2)); continue ;;
      {'|'.join(skip)}) i=$((i+2)); continue ;;
      -*) ;;
      *) if [ -z "$verb" ]; then verb=${{COMP_WORDS[i]}}; else positional=$((positional+1)); fi ;;
    esac
    i=$((i+1))
  done
  if [ -z "$verb" ]; then
    COMPREPLY=($(compgen -W "{' '.join(subs)}" -- "$cur"))
    return 0
  fi
  case $verb in
{body}
    *) return 0 ;;
  esac
  case $prev in
    -o|--output) COMPREPLY=($(compgen -W "text json yaml" -- "$cur")); return 0 ;;
    -n|--namespace) COMPREPLY=($(compgen -W "$(kubectl get namespaces -o name 2>/dev/null | sed 's,^namespace/,,')" -- "$cur")); return 0 ;;
    completion) COMPREPLY=($(compgen -W "{' '.join(SHELLS)}" -- "$cur")); return 0 ;;
  esac
  case $valued in *" $prev "*) return 0 ;; esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [ "$named" = 1 ] && [ "$positional" = 0 ]; then
    COMPREPLY=($(compgen -W "$(kubectl get toolruntimes.baton.dev ${{ns:+-n "$ns"}} -o name 2>/dev/null | sed 's,^.*/,,')" -- "$cur"))
  fi
  return 0
}}
complete -F _kubectl_baton kubectl-baton
"""
    if shell == "zsh":
        text = text.replace("# Load it", "# zsh runs bash completions through bashcompinit.\n# Load it", 1)
        text = text.replace("_kubectl_baton() {", "autoload -U +X bashcompinit && bashcompinit\n_kubectl_baton() {", 1)
    return text
