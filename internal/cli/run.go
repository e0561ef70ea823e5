package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Run executes root with args as the command line would, and returns what
// it wrote to standard output and standard error and Execute's error. The
// binaries' tests drive their command trees through it. Cobra keeps parsed
// flag values in the tree, so give each call a fresh one (newRoot()).
func Run(root *cobra.Command, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

// CheckVersion runs `PROGRAM version` and `PROGRAM --version` on fresh trees
// from newRoot and returns an error (errors.Join) for each that fails or
// prints anything but [VersionLine] of the root's name: the test both
// binaries share (it returns an error rather than taking a *testing.T so
// that the testing package stays out of the daemon's binary).
func CheckVersion(newRoot func() *cobra.Command) error {
	var errs []error
	for _, args := range [][]string{{"version"}, {"--version"}} {
		root := newRoot()
		want := VersionLine(root.Name())
		out, _, err := Run(root, args...)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %s: %w", root.Name(), strings.Join(args, " "), err))
		case out != want+"\n":
			errs = append(errs, fmt.Errorf("%s %s printed %q, want %q", root.Name(), strings.Join(args, " "), out, want+"\n"))
		}
	}
	return errors.Join(errs...)
}
