#!/usr/bin/env bash
# cowstate-isolation's command line: --version, numbers checked rather than wrapped, a
# short real-thread run. usage: isolation.sh PATH/TO/cowstate-isolation
isolation=$1
source "$(dirname "$0")/lib.sh"
expect_exit 0 "^cowstate-isolation [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]{12}(-dirty)?|unknown)\)$" -- "$isolation" --version
expect_exit 2 "--seed: expected an unsigned integer in \[0, 18446744073709551615\], found '-1'" -- "$isolation" --seed -1
expect_exit 2 "--seconds: expected a number of seconds in \[0, 31536000\], found 'nan'" -- "$isolation" --seconds nan
expect_exit 2 "--mix: .*found 'x'" -- "$isolation" --mix x
expect_exit 2 "--mix 999: there are only [0-9]+ mixes" -- "$isolation" --mix 999
expect_exit 0 "^PASS: every op result, live map and snapshot matched the model" -- "$isolation" --seconds 0.5 --runs 2 --ops 2000
finish
