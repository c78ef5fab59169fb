package crdt

import (
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	cases := []struct {
		id   string
		want bool
	}{
		{"", false},
		{"a", true},
		{"Z", true},
		{"0", true},
		{"9", true},
		{"_", true},
		{".", true},
		{":", true},
		{"@", true},
		{"-", true},
		{"user_42@eu-west-1.example:post.7", true},
		{strings.Repeat("a", MaxIDLen-1), true},
		{strings.Repeat("a", MaxIDLen), true},
		{strings.Repeat("a", MaxIDLen+1), false},
		{strings.Repeat("a", 10*MaxIDLen), false},
		{"a/b", false},
		{"/", false},
		{"a b", false},
		{" a", false},
		{"a\t", false},
		{"a\n", false},
		{"a\x00", false},
		{"\x00", false},
		{"é", false},
		{"caf\u00e9", false},
		{"日本", false},
		{"\xff", false},
		{"a+b", false},
		{"a#b", false},
		{"a?b", false},
		{"a%2F", false},
		{"a\\b", false},
		{"a,b", false},
		{"a*", false},
		{"~a", false},
	}
	for _, c := range cases {
		if got := ValidID(c.id); got != c.want {
			t.Errorf("ValidID(%q) (len %d) = %v, want %v", c.id, len(c.id), got, c.want)
		}
		if got := ValidIDBytes([]byte(c.id)); got != c.want {
			t.Errorf("ValidIDBytes(%q) (len %d) = %v, want %v", c.id, len(c.id), got, c.want)
		}
	}

	// Every single byte: exactly the documented alphabet is accepted, both
	// alone and in the middle of an otherwise valid id.
	allowed := map[byte]bool{}
	for i := 0; i < len(idAlphabet); i++ {
		allowed[idAlphabet[i]] = true
	}
	if len(allowed) != 26+26+10+5 {
		t.Fatalf("test alphabet has %d bytes", len(allowed))
	}
	for c := 0; c < 256; c++ {
		b := byte(c)
		if got := ValidID(string([]byte{b})); got != allowed[b] {
			t.Errorf("ValidID(%q) = %v, want %v", []byte{b}, got, allowed[b])
		}
		if got := ValidID("ab" + string([]byte{b}) + "cd"); got != allowed[b] {
			t.Errorf("ValidID(%q) = %v, want %v", "ab"+string([]byte{b})+"cd", got, allowed[b])
		}
	}
	// Length boundary with every allowed byte class at the end.
	for i := 0; i < len(idAlphabet); i++ {
		s := strings.Repeat("x", MaxIDLen-1) + idAlphabet[i:i+1]
		if !ValidID(s) || ValidID(s+"x") {
			t.Errorf("length boundary wrong for trailing %q", idAlphabet[i])
		}
	}
}
