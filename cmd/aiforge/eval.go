package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/eval"
	"github.com/aiforge/aiforge/internal/eval/admission"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/guard"
)

func evalCmd() *cobra.Command {
	c := &cobra.Command{Use: "eval", Short: "Evaluations"}
	var o eval.Options
	var (
		sim    bool
		misses string
	)
	retrieval := &cobra.Command{
		Use:   "retrieval",
		Short: "Score retrieval (recall@5, recall@10, MRR, nDCG@10) for sparse, dense and hybrid search on an evaluation set",
		Long: `Index a corpus with the same chunking, analyzer and index the retriever uses, run the queries and score
them against the passages that answer them, per mode:

  sparse-bm25      plain BM25 over the chunk text (the sparse search before issue 18)
  sparse           BM25F (text, own heading, headings above) + coordination, proximity, question words,
                   WordNet synonyms, full words of short forms, RM3 feedback, navigation demotion
  dense            cosine on the embeddings engine's vectors
  hybrid           the default fusion: z-scores, the dense list at weight 0.45, times its agreement with the sparse one
                   (or the fusion --fusion, --embedding-weight and --text-weight give, as a model binding's hybrid_search)
  hybrid-zscore    z-scores at equal weights, without the agreement factor
  hybrid-rrf       Reciprocal Rank Fusion (k 60) of dense and sparse
  hybrid-weighted  weighted sum of dense (cosine) and sparse (BM25 / the best) scores

Sparse modes always run; dense and hybrid run with an embeddings engine (--embedding-url and
--embedding-model, or --embedding-sim for the engine simulator's vectors: a weak lexical model, feature
hashing of word stems and their character trigrams). --dense-oracle embeds each question together with
its answer passages: a stand-in for an embedding model much stronger than keyword search, to see how
each fusion does when the dense list is the better one (it measures the fusion, not a model).

Sets: "bundled" (default; a small CC0 corpus compiled into the binary), "debian": 115 questions over
four manuals from Debian packages, "debian-heldout": 35 more over the Debian FAQ PDF, never tuned on
(a check of what was tuned on "debian"), and "debian-heldout2": 34 more on FAQ sections neither asks
about, a second check. They read the documents from the installed packages
(--corpus overrides the root, /usr/share). Install them with:

  apt-get install -y debian-faq python-reportlab-doc developers-reference live-manual-html`,
		Example: `  aiforge eval retrieval
  aiforge eval retrieval --set debian --embedding-sim
  aiforge eval retrieval --set debian --embedding-sim --dense-oracle --fusion zscore --embedding-weight 1.5 --text-weight 1
  aiforge eval retrieval --set debian --embedding-url http://127.0.0.1:8080/v1 --embedding-model bge-small`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.EmbeddingKey = os.Getenv("AIFORGE_EMBEDDING_API_KEY")
			if sim {
				if o.EmbeddingURL != "" {
					return fmt.Errorf("--embedding-sim and --embedding-url exclude each other")
				}
				_, base, closeFn, err := enginesim.Start(enginesim.Config{Models: []string{"sim-embed"}, EmbeddingDims: 384})
				if err != nil {
					return err
				}
				defer closeFn()
				o.EmbeddingURL, o.EmbeddingModel = base, "sim-embed"
			}
			set := o.Set
			if o.QueriesFile != "" {
				set = o.QueriesFile
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "indexing and scoring %s ...\n", cmp.Or(set, "the bundled set"))
			scores, err := eval.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			printRetrievalScores(cmd.OutOrStdout(), scores)
			if misses != "" {
				return printMisses(cmd.OutOrStdout(), scores, misses)
			}
			return nil
		},
	}
	retrieval.Flags().StringVar(&o.Set, "set", "", "evaluation set: bundled (default), debian, debian-heldout or debian-heldout2")
	retrieval.Flags().StringVar(&o.CorpusDir, "corpus", "", "directory of documents, or the root of the set's files (default: the set's)")
	retrieval.Flags().StringVar(&o.QueriesFile, "queries", "", "JSON queries with their relevant passages, or a set (default: the set's)")
	retrieval.Flags().StringSliceVar(&o.Files, "files", nil, "score only these files of the set (and their questions)")
	retrieval.Flags().StringVar(&o.Half, "half", "", "score only the queries of even or odd index in the set (two disjoint halves: tune on one, check on the other)")
	retrieval.Flags().StringVar(&o.EmbeddingURL, "embedding-url", "", "OpenAI-compatible base URL (ending in /v1) for dense and hybrid search")
	retrieval.Flags().StringVar(&o.EmbeddingModel, "embedding-model", "", "embedding model name at that URL")
	retrieval.Flags().IntVar(&o.ChunkTokens, "chunk-tokens", 0, "chunk size in tokens (default: the set's; bundled 80, debian 800 as OpenAI's auto)")
	retrieval.Flags().IntVar(&o.OverlapTokens, "overlap-tokens", 0, "chunk overlap in tokens (default: the set's)")
	retrieval.Flags().BoolVar(&sim, "embedding-sim", false, "embed with the engine simulator (384 dimensions, in process)")
	retrieval.Flags().BoolVar(&o.DenseOracle, "dense-oracle", false, "embed each question with its answer passages (a stand-in for a strong embedding model)")
	retrieval.Flags().StringVar(&o.Hybrid.Method, "fusion", "", "fusion of the hybrid mode: agreement (default), zscore, rrf or weighted")
	retrieval.Flags().Float64Var(&o.Hybrid.DenseWeight, "embedding-weight", 0, "the hybrid mode's weight of the dense list (with --text-weight; both 0: the fusion's defaults)")
	retrieval.Flags().Float64Var(&o.Hybrid.SparseWeight, "text-weight", 0, "the hybrid mode's weight of the sparse list")
	retrieval.Flags().StringVar(&misses, "misses", "", "then list the questions this mode (e.g. sparse) did not answer in its top 5, with the rank it found the answer at (0: not in the top 10)")
	c.AddCommand(retrieval, evalAdmissionCmd())
	return c
}

func evalAdmissionCmd() *cobra.Command {
	var split, externalURL string
	c := &cobra.Command{
		Use:   "admission",
		Short: "Score the admission guard (recall per category, false-positive rate) on a labelled set of prompts",
		Long: `Run the built-in prompt classifier over the bundled labelled set (internal/eval/admission/testdata,
compiled into the binary): attacks in five categories (injection, jailbreak, system prompt extraction,
data exfiltration, destructive commands) in eleven languages, hidden by encodings and Unicode smuggling,
planted in documents and tool outputs or buried in long texts, and benign prompts, many of them
look-alikes. Prints recall per category, the false-positive rate per technique and language, and the
latency of each classification. With --external-url, an external classifier is combined with the
built-in one.

Exits with status 1 when overall recall is below 95% or the false-positive rate above 3%.`,
		Example: `  aiforge eval admission
  aiforge eval admission --split test
  aiforge eval admission --external-url http://127.0.0.1:8000/classify`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := admissionClassifier(externalURL)
			if err != nil {
				return err
			}
			return evalAdmission(cmd.Context(), cmd.OutOrStdout(), cl, split)
		},
	}
	c.Flags().StringVar(&split, "split", "all", "cases to score: dev, test or all")
	c.Flags().StringVar(&externalURL, "external-url", "", "URL of an external classifier to combine with the built-in one")
	return c
}

// printMisses lists the questions mode did not answer in its top 5.
func printMisses(w io.Writer, scores []eval.Scores, mode string) error {
	var modes []string
	for _, s := range scores {
		if s.Mode != mode {
			modes = append(modes, s.Mode)
			continue
		}
		fmt.Fprintf(w, "\n%s: questions not answered in the top 5 (rank of the first answer; 0: not in the top 10)\n", mode)
		for i, r := range s.Ranks {
			if r == 0 || r > 5 {
				fmt.Fprintf(w, "%4d  %s\n", r, s.Questions[i])
			}
		}
		return nil
	}
	return fmt.Errorf("--misses %q: no such mode in this run (%s)", mode, strings.Join(modes, ", "))
}

func printRetrievalScores(w io.Writer, scores []eval.Scores) {
	fmt.Fprintf(w, "%-16s %7s %9s %9s %7s %8s\n", "mode", "queries", "recall@5", "recall@10", "MRR", "nDCG@10")
	for _, s := range scores {
		fmt.Fprintf(w, "%-16s %7d %9.3f %9.3f %7.3f %8.3f\n", s.Mode, s.Queries, s.Recall5, s.Recall10, s.MRR, s.NDCG10)
	}
}

// evalAdmission scores cl on the bundled set's split, prints the report and
// fails when the run misses the targets.
func evalAdmission(ctx context.Context, w io.Writer, cl guard.Classifier, split string) error {
	cases, err := admission.Bundled()
	if err != nil {
		return err
	}
	if cases, err = admission.Select(cases, split); err != nil {
		return err
	}
	r := admission.Run(ctx, cl, cases)
	r.Print(w)
	if err := r.Err(); err != nil {
		return fmt.Errorf("admission eval: %w", err)
	}
	return nil
}

// admissionClassifier is the classifier the eval scores: the built-in one,
// or with externalURL the combination the edge runs with
// --admission-classifier-url (the higher score of the two per category).
func admissionClassifier(externalURL string) (guard.Classifier, error) {
	builtin := guard.NewBuiltin(guard.BuiltinConfig{})
	if externalURL == "" {
		return builtin, nil
	}
	ext, err := guard.NewHTTP(guard.HTTPConfig{URL: externalURL})
	if err != nil {
		return nil, fmt.Errorf("--external-url: %w", err)
	}
	return guard.Combine("max", ext, builtin), nil
}
