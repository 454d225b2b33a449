package lexical

import "slices"

// StopWords returns a copy of the English stop-word list used by NewEnglish.
func StopWords() []string {
	return append([]string(nil), snowballStopWords...)
}

// IsStopWord reports whether the lowercased word w is an English stop word.
func IsStopWord(w string) bool {
	_, ok := stopSet[w]
	return ok
}

// QueryVector turns a query's terms (from Terms) into a sparse vector of
// TermIDs in increasing order, each with weight 1 per occurrence (a term
// repeated in the query counts more). Multiply by IDF when the index does not
// apply it itself (Qdrant's "idf" modifier does).
func QueryVector(terms []string) (indices []uint32, values []float32) {
	counts := make(map[uint32]float32, len(terms))
	for _, t := range terms {
		counts[TermID(t)]++
	}
	indices = make([]uint32, 0, len(counts))
	for id := range counts {
		indices = append(indices, id)
	}
	slices.Sort(indices)
	values = make([]float32, len(indices))
	for i, id := range indices {
		values[i] = counts[id]
	}
	return indices, values
}
