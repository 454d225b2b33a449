package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/eval"
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
	c.AddCommand(retrieval)
	return c
}
