package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/eval"
	"github.com/aiforge/aiforge/internal/eval/admission"
	"github.com/aiforge/aiforge/pkg/guard"
)

func evalCmd() *cobra.Command {
	c := &cobra.Command{Use: "eval", Short: "Evaluations"}
	var o eval.Options
	retrieval := &cobra.Command{
		Use:   "retrieval",
		Short: "Score retrieval (recall@k, MRR, nDCG@10) for sparse, dense and hybrid search on an evaluation set",
		Long: `Index a corpus with the same chunking, analyzer and index the retriever uses, run the queries and score
them against the passages that answer them. Sparse (BM25) always runs; dense and hybrid run when an
OpenAI-compatible embeddings engine is given. The bundled set (internal/eval/dataset, compiled into the binary) is a small CC0 corpus.`,
		Example: `  aiforge eval retrieval
  aiforge eval retrieval --embedding-url http://127.0.0.1:8080/v1 --embedding-model bge-small`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.EmbeddingKey = os.Getenv("AIFORGE_EMBEDDING_API_KEY")
			corpus, queries := o.CorpusDir, o.QueriesFile
			if corpus == "" {
				corpus = "the bundled corpus"
			}
			if queries == "" {
				queries = "the bundled queries"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "indexing %s and scoring %s ...\n", corpus, queries)
			scores, err := eval.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%-8s %8s %10s %8s %8s\n", "mode", "queries", "recall@"+fmt.Sprint(o.K), "MRR", "nDCG@10")
			for _, s := range scores {
				fmt.Fprintf(out, "%-8s %8d %10.3f %8.3f %8.3f\n", s.Mode, s.Queries, s.Recall, s.MRR, s.NDCG10)
			}
			return nil
		},
	}
	retrieval.Flags().StringVar(&o.CorpusDir, "corpus", "", "directory of documents (default: the bundled corpus)")
	retrieval.Flags().StringVar(&o.QueriesFile, "queries", "", "JSON queries with their relevant passages (default: the bundled queries)")
	retrieval.Flags().IntVar(&o.K, "k", 10, "k of recall@k")
	retrieval.Flags().StringVar(&o.EmbeddingURL, "embedding-url", "", "OpenAI-compatible base URL (ending in /v1) for dense and hybrid search")
	retrieval.Flags().StringVar(&o.EmbeddingModel, "embedding-model", "", "embedding model name at that URL")
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
