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
