package responses

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/vectorstores"
)

func result(file, name, raw string, pages []int) vectorstores.Result {
	text, spans := vectorstore.SplitPages(raw, pages)
	return vectorstores.Result{FileID: file, Filename: name, Content: []map[string]any{{"type": "text", "text": text}}, Pages: pages, PageSpans: spans}
}

func TestSentences(t *testing.T) {
	text := "First one. Second, with 3.5 units! Third cites [2].\nFourth ends \"quoted.\" Last without a stop"
	var got []string
	for _, s := range sentences(text) {
		got = append(got, text[s.start:s.end])
	}
	want := []string{"First one.", "Second, with 3.5 units!", "Third cites [2].", "Fourth ends \"quoted.\"", "Last without a stop"}
	if !slices.Equal(got, want) {
		t.Fatalf("sentences = %q", got)
	}
	if m := markers("as said [1] and [2, 3]."); !slices.Equal(m, []int{1, 2, 3}) {
		t.Fatalf("markers = %v", m)
	}
}

// Each annotation sits at the end of the sentence it supports, names the
// file whose chunk matched, and the page of the matched chunk sentence.
func TestCitationsAtTheSentence(t *testing.T) {
	results := []vectorstores.Result{
		result("file-a", "phones.pdf", "Pairing a phone needs Bluetooth enabled in settings.\f Reset the headset by holding the power button for ten seconds.", []int{4, 5}),
		result("file-b", "billing.pdf", "Invoices are emailed monthly to the account owner.", []int{9}),
	}
	answer := "Turn on Bluetooth in the phone settings before pairing. " +
		"Invoices arrive monthly by email. " +
		"To reset the headset, hold the power button for ten seconds. " +
		"Nothing here matches anything."
	got := placeCitations(answer, results)
	end := func(s string) int { return utf8.RuneCountInString(answer[:strings.Index(answer, s)+len(s)]) }
	want := []citation{
		{Type: "file_citation", Index: end("before pairing."), FileID: "file-a", Filename: "phones.pdf", Pages: []int{4}},
		{Type: "file_citation", Index: end("by email."), FileID: "file-b", Filename: "billing.pdf", Pages: []int{9}},
		{Type: "file_citation", Index: end("ten seconds."), FileID: "file-a", Filename: "phones.pdf", Pages: []int{5}},
	}
	if len(got) != len(want) {
		t.Fatalf("citations = %+v", got)
	}
	for i := range want {
		if got[i].Index != want[i].Index || got[i].FileID != want[i].FileID || !slices.Equal(got[i].Pages, want[i].Pages) {
			t.Errorf("citation %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// An explicit [n] marker cites source n even with little overlap; a chunk
// without page breaks cites all its pages; the index counts characters,
// not bytes.
func TestCitationsMarkersAndPages(t *testing.T) {
	results := []vectorstores.Result{
		result("file-a", "a.pdf", "Warranty covers screens for two years.", []int{2, 3}),
		result("file-b", "b.pdf", "Shipping takes five days.", []int{7}),
	}
	answer := "Über alles: it ships quickly [2]. The warranty covers screens for two years."
	got := placeCitations(answer, results)
	if len(got) != 2 {
		t.Fatalf("citations = %+v", got)
	}
	first := "Über alles: it ships quickly [2]."
	if got[0].FileID != "file-b" || got[0].Index != utf8.RuneCountInString(first) || !slices.Equal(got[0].Pages, []int{7}) {
		t.Errorf("marker citation = %+v", got[0])
	}
	if got[1].FileID != "file-a" || got[1].Index != utf8.RuneCountInString(answer) || !slices.Equal(got[1].Pages, []int{2, 3}) {
		t.Errorf("lexical citation = %+v", got[1])
	}
	// Nothing supported: each file once at the end (the renderer's fallback).
	rw := &renderer{results: results}
	fb := rw.citations("zzz qqq.")
	if len(fb) != 2 || fb[0].Index != len("zzz qqq.") || !slices.Equal(fb[0].Pages, []int{2, 3}) {
		t.Errorf("fallback = %+v", fb)
	}
}
