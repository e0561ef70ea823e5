package region

import "testing"

// TestNameHeldByOnJoin: a gateway that joins a cluster where another
// member already holds its name learns the holder's address by the time
// its Join returns (the seed's state carries it), and the cluster keeps
// the holder. Before, the conflict was only logged and counted on the
// other members; the newcomer could not tell.
func TestNameHeldByOnJoin(t *testing.T) {
	cs := startCluster(t, "a1", "b1")
	holder := cs[0]
	dup := start(t, testConfig("a1", "a"))
	if _, ok := dup.NameHeldBy(); ok {
		t.Fatal("a name conflict before joining")
	}
	join(t, dup, cs[1])
	got, ok := dup.NameHeldBy()
	if !ok || got != holder.Addr() {
		t.Fatalf("NameHeldBy after joining = %q, %v; want %q, true", got, ok, holder.Addr())
	}
	if gw, ok := cs[1].View().Gateway("a1"); !ok || gw.Gossip.String() != holder.Addr() || !gw.State.Live() {
		t.Fatalf("b1 sees a1 as %+v, want live at %s", gw, holder.Addr())
	}
	if _, ok := cs[1].NameHeldBy(); ok {
		t.Fatal("b1, whose name nobody claims, reports a conflict about it")
	}
}

// TestEncodeMetaVersion1: a writer of metadata version 1 (what a gateway
// of the release before version 2 announced, for tests of a fleet in the
// middle of an upgrade) writes what that release wrote: the version-2
// fields left out, and today's reader reads it with them empty.
func TestEncodeMetaVersion1(t *testing.T) {
	m := testMeta("a", 3)
	b, err := EncodeMetaVersion(m, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := metaV1(t, m); string(b) != string(want) {
		t.Fatalf("version 1 encoding % x, want % x", b, want)
	}
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Region != m.Region || len(got.Wire) != 0 || got.Capacity != 0 || len(got.Planes) != len(m.Planes) {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := EncodeMetaVersion(m, 3); err == nil {
		t.Fatal("version 3 encoded")
	}
}
