package cliutil

import (
	"errors"
	"slices"
	"strconv"
	"testing"
)

type num int

func (n num) String() string { return strconv.Itoa(int(n)) }

func parseNum(s string) (num, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("not a number")
	}
	return num(n), nil
}

// A repeatable list flag: the first value given replaces the defaults,
// later ones add to it, and "" leaves none.
func TestListFlag(t *testing.T) {
	cases := []struct {
		sets []string
		want []num
	}{
		{nil, []num{7, 8}},
		{[]string{"1"}, []num{1}},
		{[]string{"1", "2"}, []num{1, 2}},
		{[]string{""}, nil},
	}
	for _, c := range cases {
		f := ListFlag[num]{List: []num{7, 8}, Parse: parseNum}
		for _, s := range c.sets {
			if err := f.Set(s); err != nil {
				t.Fatalf("%v: Set(%q): %v", c.sets, s, err)
			}
		}
		if !slices.Equal(f.List, c.want) {
			t.Errorf("%v: %v, want %v", c.sets, f.List, c.want)
		}
	}
	f := ListFlag[num]{Parse: parseNum}
	if err := f.Set("x"); err == nil {
		t.Error("Set(\"x\") took a value Parse refuses")
	}
	if got := (&ListFlag[num]{List: []num{1, 2}}).String(); got != "1 2" {
		t.Errorf("String() = %q, want \"1 2\"", got)
	}
}

func TestSplitList(t *testing.T) {
	if got := SplitList(" a, ,b ,"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("SplitList = %q", got)
	}
	if got := SplitList(" , "); got != nil {
		t.Errorf("SplitList of nothing = %q, want nil", got)
	}
}
