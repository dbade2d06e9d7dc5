# Helpers of the CLI tests (tests/cli/*.sh). Source it after setting `cowstate` to the
# binary under test; each test script ends with `finish`.
set -uo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passed=0
if ! command -v jq >/dev/null; then
  echo "FAIL: jq is not installed (scripts/install-deps installs it)"
  exit 1
fi

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
pass() { passed=$((passed + 1)); }

# expect_exit CODE PATTERN -- COMMAND...: the command exits CODE and its output (stdout and
# stderr) matches the extended regular expression PATTERN.
expect_exit() {
  local want=$1 pattern=$2
  shift 3
  local out code
  out=$("$@" 2>&1)
  code=$?
  if [[ $code -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$* -> exit $code (want $want), output did not match /$pattern/:"
    echo "$out" | head -20 | sed 's/^/    /'
  else
    pass
  fi
}

# check DESCRIPTION COMMAND...: the command succeeds.
check() {
  local what=$1
  shift
  if "$@" >/dev/null; then pass; else fail "$what"; fi
}

finish() {
  echo "$passed passed, $failures failed"
  ((failures == 0))
}
