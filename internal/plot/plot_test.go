package plot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestSaveWritesSVGAndPNG(t *testing.T) {
	dir := t.TempDir()
	s := Spec{
		Title: "t", XLabel: "x", YLabel: "y",
		Lines: []Line{
			{Label: "solid", X: []float64{0, 1, 2}, Y: []float64{1, 2, 1}, Color: -1},
			{Label: "dashed", X: []float64{0, 1, 2}, Y: []float64{2, 1, 2}, Style: Dashed, Color: -1},
			{Label: "points", X: []float64{0, 1, 2}, Y: []float64{0, 1, 0}, Style: Points, Color: -1},
			{Label: "scatter", X: []float64{0, 1, 2}, Y: []float64{3, 3, 3}, Style: Scatter, Color: -1},
			{Label: "dashed points", X: []float64{0, 1, 2}, Y: []float64{4, 3, 4}, Style: DashedPoints, Color: -1},
			{Label: "empty", Color: -1},
		},
		Marks: []Mark{{X: 1.5, Label: "fault"}},
	}
	for _, ext := range []string{"svg", "png"} {
		path := filepath.Join(dir, "sub", "lines."+ext)
		if err := SaveSpec(s, path); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch ext {
		case "svg":
			if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("fault")) {
				t.Errorf("svg lacks the svg element or the mark's legend entry")
			}
		case "png":
			if !bytes.HasPrefix(b, []byte("\x89PNG")) {
				t.Errorf("png file does not start with the PNG signature")
			}
		}
	}
	bars, err := Bars("shares", "share", []string{"a", "b"}, Shares([]float64{1, 3}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(bars, SmallW, SmallH, filepath.Join(dir, "bars.svg")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "bars.svg")); err != nil || fi.Size() == 0 {
		t.Errorf("bars.svg not written: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := CheckFormat("jpeg"); err == nil {
		t.Error("CheckFormat accepted jpeg")
	}
	if f, err := CheckFormat(""); err != nil || f != SVG {
		t.Errorf("CheckFormat(\"\") = %q, %v; want svg", f, err)
	}
	p, err := Spec{}.Plot()
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(p, SmallW, SmallH, filepath.Join(t.TempDir(), "x.gif")); err == nil {
		t.Error("Save wrote a .gif")
	}
	if _, err := (Spec{Lines: []Line{{X: []float64{1}, Y: nil}}}).Plot(); err == nil {
		t.Error("a line with 1 x and 0 y values was accepted")
	}
	if _, err := Bars("", "", []string{"a"}, nil, 0); err == nil {
		t.Error("Bars accepted 1 name for 0 values")
	}
	if _, err := Bars("", "", nil, nil, 0); err == nil {
		t.Error("Bars accepted no bars")
	}
}

func TestShares(t *testing.T) {
	got := Shares([]float64{1, 3})
	if got[0] != 0.25 || got[1] != 0.75 {
		t.Errorf("Shares(1, 3) = %v", got)
	}
	if got := Shares([]float64{0, 0}); got[0] != 0 || got[1] != 0 {
		t.Errorf("Shares(0, 0) = %v", got)
	}
}

// TestLogXOneValue: a log axis with a single x value (one message size)
// is drawn, and x <= 0 on it is an error, not a panic.
func TestLogXOneValue(t *testing.T) {
	dir := t.TempDir()
	s := Spec{LogX: true, ZeroY: true, Lines: []Line{{Label: "p50", X: []float64{1}, Y: []float64{80}}}}
	if err := SaveSpec(s, filepath.Join(dir, "one.svg")); err != nil {
		t.Fatal(err)
	}
	s.Lines[0].X[0] = 0
	if err := SaveSpec(s, filepath.Join(dir, "zero.svg")); err == nil {
		t.Error("x = 0 on a log axis accepted")
	}
}

// PathSpecs: one scatter per path, zero samples skipped, the window in KiB,
// and a series whose rows do not match the times left out.
func TestPathSpecs(t *testing.T) {
	tt := []float64{1, 2}
	rtt := [][]float64{{40, 50}, {0, 60}}
	cwnd := [][]float64{{2048, 4096}, {1024, 0}}
	got := PathSpecs("x", tt, rtt, cwnd, []Mark{{X: 1.5, Label: "fault"}})
	if len(got) != 2 || got[0].Name != "path-rtt" || got[1].Name != "path-cwnd" {
		t.Fatalf("specs %+v", got)
	}
	r := got[0].Spec
	if len(r.Lines) != 2 || len(r.Lines[0].X) != 1 || r.Lines[0].Y[0] != 40 || len(r.Lines[1].Y) != 2 || len(r.Marks) != 1 {
		t.Fatalf("rtt lines %+v marks %v", r.Lines, r.Marks)
	}
	if w := got[1].Spec.Lines[0].Y; len(w) != 2 || w[0] != 2 || w[1] != 1 {
		t.Fatalf("path 0 window in KiB %v, want [2 1]", w)
	}
	if got := PathSpecs("x", tt, rtt[:1], nil, nil); len(got) != 0 {
		t.Fatalf("mismatched rows drawn: %+v", got)
	}
	for _, n := range got {
		if err := SaveSpec(n.Spec, t.TempDir()+"/"+n.Name+".svg"); err != nil {
			t.Fatal(err)
		}
	}
}
