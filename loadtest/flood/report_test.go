package flood

import (
	"strings"
	"testing"
)

// TestWriteTableIsMarkdown: the table is one a Markdown renderer takes:
// every line of it has as many cells as the header, and the delimiter
// row has nothing but dashes in its cells (an empty cell there would make
// the whole table plain text).
func TestWriteTableIsMarkdown(t *testing.T) {
	var b strings.Builder
	rows := []Row{
		{Target: "lan-junk", Socket: "lan.listen", Unit: "datagrams", DatagramsSent: 1000},
		{Target: "gossip-tcp", Socket: "gossip.bind", Unit: "connections", DatagramsSent: 10},
	}
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "|") {
			table = append(table, l)
		}
	}
	if len(table) != 2+len(rows) {
		t.Fatalf("%d table lines, want %d:\n%s", len(table), 2+len(rows), b.String())
	}
	cells := func(l string) []string {
		if !strings.HasSuffix(l, "|") {
			t.Errorf("line does not end its last cell: %q", l)
		}
		return strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|"), "|")
	}
	head := cells(table[0])
	for i, l := range table[1:] {
		if n := len(cells(l)); n != len(head) {
			t.Errorf("line %d has %d cells, the header %d: %q", i+2, n, len(head), l)
		}
	}
	for _, c := range cells(table[1]) {
		if strings.Trim(c, " -") != "" || !strings.Contains(c, "-") {
			t.Errorf("delimiter cell %q is not dashes: %q", c, table[1])
		}
	}
}
