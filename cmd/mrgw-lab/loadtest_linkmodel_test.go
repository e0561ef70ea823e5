//go:build linux

package main

import (
	"strings"
	"testing"
)

// The link-model experiment names its variants, and refuses an unknown
// one before it sets anything up; its child process refuses a role it
// does not know.
func TestLinkModelArguments(t *testing.T) {
	if _, _, err := run(t, "loadtest", "link-model", "--variants", "default,nope"); err == nil || !strings.Contains(err.Error(), `unknown link-model variant "nope"`) {
		t.Errorf("err = %v", err)
	}
	if _, _, err := run(t, "loadtest", "link-model-child", "serve", "1"); err == nil || !strings.Contains(err.Error(), "unknown child role") {
		t.Errorf("child: err = %v", err)
	}
}
