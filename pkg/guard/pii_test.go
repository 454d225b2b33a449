package guard

import (
	"reflect"
	"strings"
	"testing"
)

func kindsIn(text string) []string {
	var ks []string
	for _, m := range FindPII(text) {
		ks = append(ks, m.Kind+"="+text[m.Start:m.End])
	}
	return ks
}

func TestFindPII(t *testing.T) {
	cases := []struct {
		text string
		want []string
	}{
		{"mail me at jane.doe+work@example.co.uk please", []string{"email=jane.doe+work@example.co.uk"}},
		{"call +44 20 7946 0958 or 06 12 34 56 78", []string{"phone=+44 20 7946 0958", "phone=06 12 34 56 78"}},
		{"US: (415) 555-2671.", []string{"phone=(415) 555-2671"}},
		{"E.164 +14155552671", []string{"phone=+14155552671"}},
		{"meeting on 2024-05-17 at 10:30, order 12345678, total 1.234.567", nil},
		{"born 17/05/1990, ref 12-05-2024", nil},
		{"IBAN DE89 3704 0044 0532 0130 00 for rent", []string{"iban=DE89 3704 0044 0532 0130 00"}},
		{"GB82WEST12345698765432", []string{"iban=GB82WEST12345698765432"}},
		{"not an iban: DE89 3704 0044 0532 0130 01", nil},
		{"card 4111 1111 1111 1111 exp 12/29", []string{"card=4111 1111 1111 1111"}},
		{"amex 378282246310005", []string{"card=378282246310005"}},
		{"fails luhn 4111 1111 1111 1112", nil},
		{"sixteen digits 1234567812345678 that fail Luhn", nil},
		{"key sk-af-AbCdEf0123456789xyzXYZ and sk-proj-abcdefghijklmnop1234", []string{"api_key=sk-af-AbCdEf0123456789xyzXYZ", "api_key=sk-proj-abcdefghijklmnop1234"}},
		{"aws AKIAIOSFODNN7EXAMPLE here", []string{"api_key=AKIAIOSFODNN7EXAMPLE"}},
		{"gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 slack xoxb-1234567890-abcdefghij", []string{"api_key=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "api_key=xoxb-1234567890-abcdefghij"}},
		{`config: token="q8Zr2LmX9vT4kP7sW1yB3nC6" ok`, []string{"api_key=q8Zr2LmX9vT4kP7sW1yB3nC6"}},
		{"password = aaaaaaaaaaaaaaaaaaaa", nil}, // no entropy
		{"the token bucket algorithm limits requests", nil},
		{"version 1.22.3 and 3.14159", nil},
	}
	for _, c := range cases {
		if got := kindsIn(c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.text, got, c.want)
		}
	}
}

func TestMaskPII(t *testing.T) {
	in := "Write to bob@example.com, card 5555 5555 5555 4444, key AKIAIOSFODNN7EXAMPLE, phone +33 6 12 34 56 78."
	masked, kinds := MaskPII(in)
	want := "Write to [EMAIL], card [CARD], key [API_KEY], phone [PHONE]."
	if masked != want {
		t.Fatalf("masked %q, want %q", masked, want)
	}
	if !reflect.DeepEqual(kinds, []string{"api_key", "card", "email", "phone"}) {
		t.Fatalf("kinds %v", kinds)
	}
	if m, k := MaskPII("nothing here"); m != "nothing here" || k != nil {
		t.Fatalf("clean text changed: %q %v", m, k)
	}
	big := strings.Repeat("no secrets in this line at all. ", 2000)
	if m, _ := MaskPII(big); m != big {
		t.Fatal("long clean text changed")
	}
}
