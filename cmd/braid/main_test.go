package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeBuilds()
	os.Exit(code)
}

// runArgs runs the dispatcher on args and returns its exit status and
// output.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Help of braid itself and of every command goes to stdout with exit 0;
// an unknown flag or a bad value exits 2 with the flag package's message
// and the usage on stderr.
func TestHelpAndBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		code, out, errOut := runArgs(t, args...)
		if code != exitOK || !strings.HasPrefix(out, "braid — ") || errOut != "" {
			t.Errorf("braid %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
		for _, c := range commands {
			if !strings.Contains(out, "braid "+c+" ") {
				t.Errorf("braid %s: usage does not list %s", strings.Join(args, " "), c)
			}
		}
	}
	if code, out, errOut := runArgs(t); code != exitUsage || out != "" || !strings.Contains(errOut, "Usage:") {
		t.Errorf("braid: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := runArgs(t, "bogus"); code != exitUsage || out != "" || !strings.Contains(errOut, `unknown command "bogus"`) {
		t.Errorf("braid bogus: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, c := range commands {
		for _, args := range [][]string{{c, "-h"}, {c, "--help"}, {"help", c}} {
			code, out, errOut := runArgs(t, args...)
			if code != exitOK || errOut != "" {
				t.Errorf("braid %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
			}
			// The command's own usage: its name and its flags' defaults.
			if !strings.Contains(out, "braid "+c) || !strings.Contains(out, "\n  -") {
				t.Errorf("braid %s: stdout is not %s's usage: %q", strings.Join(args, " "), c, out)
			}
		}
		code, out, errOut := runArgs(t, c, "--no-such-flag")
		if code != exitUsage || out != "" ||
			!strings.HasPrefix(errOut, "braid "+c+": flag provided but not defined: -no-such-flag\n") || !strings.Contains(errOut, "\n  -") {
			t.Errorf("braid %s --no-such-flag: exit %d, stdout %q, stderr %q", c, code, out, errOut)
		}
	}
	code, out, errOut := runArgs(t, "tail", "-n", "many")
	if code != exitUsage || out != "" || !strings.HasPrefix(errOut, `braid tail: invalid value "many" for flag -n`) {
		t.Errorf("braid tail -n many: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
