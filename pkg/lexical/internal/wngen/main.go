// Command wngen derives the compact synonym table of package lexical
// (synonyms.tsv.gz) from an installed WordNet 3.0 database (Debian:
// apt-get install -y wordnet-base; files in /usr/share/wordnet).
//
// For every single-word noun, verb and adjective lemma it takes the lemma's
// most frequent senses (WordNet orders a lemma's senses by their tag count in
// the SemCor corpus; only senses that were tagged at least once are used, so
// rare words and rare senses contribute nothing) and collects the other
// single-word lemmas of those synsets. Lemmas are reduced to their Snowball
// stems, the form the analyzer indexes, and the table maps a stem to the
// stems of its synonyms, most frequent sense first. Stop words, numbers and
// one- or two-letter words are left out.
//
// Output: gzip'd lines "stem<TAB>syn syn syn", sorted by stem.
package main

import (
	"bufio"
	"compress/gzip"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kljensen/snowball/english"
)

func main() {
	dict := flag.String("dict", "/usr/share/wordnet", "WordNet 3.0 dict directory")
	out := flag.String("out", "synonyms.tsv.gz", "output file")
	senses := flag.Int("senses", 2, "most frequent tagged senses used per lemma")
	maxSyn := flag.Int("max", 6, "synonyms kept per stem")
	flag.Parse()
	table := map[string][]string{}
	for _, pos := range []string{"noun", "verb", "adj"} {
		synsets, err := readData(filepath.Join(*dict, "data."+pos))
		if err != nil {
			log.Fatal(err)
		}
		if err := readIndex(filepath.Join(*dict, "index."+pos), synsets, *senses, table); err != nil {
			log.Fatal(err)
		}
	}
	keys := make([]string, 0, len(table))
	for k, v := range table {
		if len(v) > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	w := bufio.NewWriter(zw)
	for _, k := range keys {
		v := table[k]
		if len(v) > *maxSyn {
			v = v[:*maxSyn]
		}
		fmt.Fprintf(w, "%s\t%s\n", k, strings.Join(v, " "))
	}
	if err := w.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	log.Printf("%d stems written to %s", len(keys), *out)
}

// readData returns each synset's single-word lemmas by offset.
func readData(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  ") {
			continue // licence header
		}
		fs := strings.Fields(line)
		if len(fs) < 4 {
			continue
		}
		n, err := strconv.ParseInt(fs[3], 16, 32)
		if err != nil {
			continue
		}
		var words []string
		for i := 0; i < int(n) && 4+2*i < len(fs); i++ {
			w := strings.ToLower(fs[4+2*i])
			if j := strings.IndexByte(w, '('); j >= 0 {
				w = w[:j] // adjective markers: (a) (p) (ip)
			}
			words = append(words, w)
		}
		out[fs[0]] = words
	}
	return out, sc.Err()
}

// readIndex adds, for each lemma, the synonyms from its first tagged senses.
func readIndex(path string, synsets map[string][]string, senses int, table map[string][]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  ") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) < 6 {
			continue
		}
		lemma := fs[0]
		if !plainWord(lemma) {
			continue
		}
		pcnt, err := strconv.Atoi(fs[3])
		if err != nil || len(fs) < 6+pcnt {
			continue
		}
		tagged, err := strconv.Atoi(fs[5+pcnt])
		if err != nil {
			continue
		}
		offsets := fs[6+pcnt:]
		use := min(tagged, senses, len(offsets))
		stem := english.Stem(lemma, true)
		if stopWord[lemma] || stopWord[stem] {
			continue
		}
		for _, off := range offsets[:use] {
			for _, syn := range synsets[off] {
				if !plainWord(syn) || stopWord[syn] {
					continue
				}
				s := english.Stem(syn, true)
				if s == stem || len(s) < 3 || slices.Contains(table[stem], s) {
					continue
				}
				table[stem] = append(table[stem], s)
			}
		}
	}
	return sc.Err()
}

// plainWord: a lowercase single word of at least three ASCII letters.
func plainWord(w string) bool {
	if len(w) < 3 {
		return false
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// stopWord mirrors the analyzer's list plus the question words it drops
// from queries: neither is ever a query term, so neither needs synonyms.
var stopWord = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom this that these those am is are
was were be been being have has had having do does did doing would should could ought a an the and but if or because as
until while of at by for with about against between into through during before after above below to from up down in out
on off over under again further then once here there when where why how all any both each few more most other some such
no nor not only own same so than too very can may might will shall must`) {
		m[w] = true
	}
	return m
}()
