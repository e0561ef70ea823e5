package control

import (
	"strings"
	"testing"
	"time"
)

// TestSessionLogLinesNameThePeerOnce: a session's logger already carries
// peer= (and addr=); its lines must not add the key again, or every line
// reads "peer=gw-b ... peer=gw-b" and JSON logs get a duplicate key.
func TestSessionLogLinesNameThePeerOnce(t *testing.T) {
	c := newCerts(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu-west", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us-east", "gw-a")
	ctx := testCtx(t)
	ls, ds, _ := pair(t, ctx, a, b)
	if _, err := ds.RotateKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	ls.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(b.logs.String(), "session ended") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lines := 0
	for _, s := range []*side{a, b} {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if !strings.Contains(line, "control:") {
				continue
			}
			lines++
			if n := strings.Count(line, " peer="); n > 1 {
				t.Errorf("peer= %d times: %s", n, line)
			}
		}
	}
	if lines < 3 {
		t.Fatalf("only %d control log lines:\n%s\n%s", lines, a.logs.String(), b.logs.String())
	}
}
