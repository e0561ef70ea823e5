package scenario

import (
	"bytes"
	"strings"
	"testing"
)

// The page is built from the rows as they are: a row's figures, the
// RTTs of a mixed-RTT row and an unsettled run read as the table says.
func TestWriteCCTable(t *testing.T) {
	in := `{"scenario":"rtt-fairness","cc":"longrtt-htcp","rtt_ms":0,"flows":3,"capacity_bps":1e10,"goodput_bps":9.8178e9,"fraction":0.98178,"jain":0.99999,"max_queue_bytes":48382684,"shares":[0.3332,0.3331,0.3336],"note":"flows at 10, 50, 150 ms","variant":"fabric bottleneck"}
{"scenario":"incast","cc":"dcqcn","rtt_ms":0.01,"loss":0.001,"flows":64,"capacity_bps":1e11,"goodput_bps":8.856e10,"fraction":0.8856,"settle_rtts":-1,"max_queue_bytes":4190000,"queue_drops":55343}
`
	rows, err := readRows(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeCCTable(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| fabric bottleneck | longrtt-htcp | 10/50/150 | 0% | 3 | 10.00 | 9.82 | 0.982 |  | 1.000 |  | 48.38 |  | 0.333, 0.333, 0.334 |",
		"|  | dcqcn | 0.01 | 0.1% | 64 | 100.00 | 88.56 | 0.886 |  |  | not settled | 4.19 | 55343 |  |",
	}
	if len(lines) != 4 || lines[2] != want[0] || lines[3] != want[1] {
		t.Errorf("table:\n%s\nwant rows:\n%s", b.String(), strings.Join(want, "\n"))
	}
}
