package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/buildinfo"
	"github.com/mrgw/mrgw/metaroce"
)

// testRoot is a command tree like the binaries': a version, and a command
// that writes to both outputs and fails on request.
func testRoot(name string) *cobra.Command {
	root := &cobra.Command{Use: name, SilenceUsage: true, SilenceErrors: true}
	AddVersion(root)
	root.AddCommand(&cobra.Command{
		Use:  "echo",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(args, " "))
			fmt.Fprintln(cmd.ErrOrStderr(), "to stderr")
			if len(args) > 0 && args[0] == "fail" {
				return errors.New("failed")
			}
			return nil
		},
	})
	return root
}

// TestRun: each output is captured apart, and the command's error returned.
func TestRun(t *testing.T) {
	out, errOut, err := Run(testRoot("prog"), "echo", "a", "b")
	if out != "a b\n" || errOut != "to stderr\n" || err != nil {
		t.Fatalf("Run = %q, %q, %v", out, errOut, err)
	}
	if _, _, err := Run(testRoot("prog"), "echo", "fail"); err == nil || err.Error() != "failed" {
		t.Fatalf("Run of a failing command: %v", err)
	}
}

// TestVersionLine: the program, the build (as mrgw_build_info labels it)
// and the wire-protocol version.
func TestVersionLine(t *testing.T) {
	bi := buildinfo.Get()
	got := VersionLine("mrgw")
	if !strings.HasPrefix(got, "mrgw "+bi.Version+" (revision "+bi.ShortRevision()) ||
		!strings.HasSuffix(got, fmt.Sprintf(", wire protocol v%d", metaroce.Version)) {
		t.Fatalf("VersionLine = %q", got)
	}
}

// TestCheckVersion passes a tree made with AddVersion and names what is
// wrong with one whose version says something else, or that has none.
func TestCheckVersion(t *testing.T) {
	if err := CheckVersion(func() *cobra.Command { return testRoot("prog") }); err != nil {
		t.Fatal(err)
	}
	wrong := func() *cobra.Command {
		root := testRoot("prog")
		root.Version = "prog 0.0"
		return root
	}
	if err := CheckVersion(wrong); err == nil || !strings.Contains(err.Error(), `prog --version printed "prog 0.0\n"`) {
		t.Errorf("a wrong --version: %v", err)
	}
	none := func() *cobra.Command {
		return &cobra.Command{Use: "bare", Run: func(*cobra.Command, []string) {}, SilenceErrors: true, SilenceUsage: true}
	}
	err := CheckVersion(none)
	if err == nil || !strings.Contains(err.Error(), "bare version") || !strings.Contains(err.Error(), "bare --version") {
		t.Errorf("a tree without a version: %v", err)
	}
}
