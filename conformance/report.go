package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints results as an aligned table (also valid Markdown)
// followed by a summary line.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| case \t| section \t| verdict \t| detail |")
	fmt.Fprintln(tw, "|------\t|---------\t|---------\t|--------|")
	for _, r := range results {
		detail := strings.ReplaceAll(r.Detail, "|", "\\|")
		fmt.Fprintf(tw, "| %s \t| %s \t| %s \t| %s |\n", r.Case, r.Section, r.Verdict, detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, Summary(results))
	return err
}

// Summary counts verdicts: "27 cases: 25 pass, 1 fail, 1 n/a".
func Summary(results []Result) string {
	n := map[Verdict]int{}
	for _, r := range results {
		n[r.Verdict]++
	}
	return fmt.Sprintf("%d cases: %d pass, %d fail, %d n/a", len(results), n[Pass], n[Fail], n[NA])
}

// Failed reports whether any result failed.
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Verdict == Fail {
			return true
		}
	}
	return false
}

// WriteJSON writes one JSON object per result and line:
// {"case":…,"section":…,"verdict":"pass"|"fail"|"n/a","detail":…}.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	for i := range results {
		if err := enc.Encode(&results[i]); err != nil {
			return err
		}
	}
	return nil
}
