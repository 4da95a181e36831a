#!/usr/bin/env bash
# Install pacer for one user (or system-wide with PREFIX=/usr/local):
# the release binary, shell completions (bash, zsh, fish) and the man
# pages, all generated from the same clap definitions as --help.
#   bash ci/install-cli.sh            # into ~/.local
#   bash ci/install-cli.sh /usr/local
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
prefix=${1:-$HOME/.local}

cargo build --release --locked -p pacer
pacer=./target/release/pacer
install -d "$prefix/bin" "$prefix/share/man/man1" \
    "$prefix/share/bash-completion/completions" \
    "$prefix/share/zsh/site-functions" \
    "$prefix/share/fish/vendor_completions.d"
install -m 0755 "$pacer" "$prefix/bin/pacer"
"$pacer" completions bash >"$prefix/share/bash-completion/completions/pacer"
"$pacer" completions zsh >"$prefix/share/zsh/site-functions/_pacer"
"$pacer" completions fish >"$prefix/share/fish/vendor_completions.d/pacer.fish"
"$pacer" -q man --out-dir "$prefix/share/man/man1" >/dev/null
echo "installed pacer $("$pacer" --version | cut -d' ' -f2-) into $prefix:"
echo "  $prefix/bin/pacer, man pages in $prefix/share/man/man1 (man pacer-run),"
echo "  completions for bash, zsh and fish under $prefix/share"
