package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
)

func adminClient() (*cli.Client, error) {
	key := os.Getenv("AIFORGE_ADMIN_KEY")
	if key == "" {
		return nil, fmt.Errorf("AIFORGE_ADMIN_KEY is not set (aiforge up prints it on first start and keeps it in <data-dir>/admin.key)")
	}
	return &cli.Client{BaseURL: env("AIFORGE_URL", "http://127.0.0.1:8080"), Token: key}, nil
}

type listOut[T any] struct {
	Data []T `json:"data"`
}

func jsonFlag(c *cobra.Command) *bool {
	return c.Flags().Bool("json", false, "print JSON")
}

func tenantsCmd() *cobra.Command {
	c := &cobra.Command{Use: "tenants", Short: "Manage tenants (admin)"}
	create := &cobra.Command{
		Use: "create ID", Short: "Create a tenant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			var t struct {
				ID        string    `json:"id"`
				CreatedAt time.Time `json:"created_at"`
			}
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/tenants", map[string]string{"id": args[0]}, &t); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created tenant %s\n", t.ID)
			return nil
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "List tenants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			var out listOut[struct {
				ID        string    `json:"id"`
				CreatedAt time.Time `json:"created_at"`
			}]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/tenants", nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, t := range out.Data {
				rows = append(rows, []string{t.ID, t.CreatedAt.Format(time.RFC3339)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"TENANT", "CREATED"}, rows)
			return nil
		},
	}
	c.AddCommand(create, list)
	return c
}

type keyOut struct {
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Models    []string  `json:"models"`
	CreatedAt time.Time `json:"created_at"`
}

func keysCmd() *cobra.Command {
	c := &cobra.Command{Use: "keys", Short: "Manage API keys (admin)"}
	var tenant, name string
	var models []string
	create := &cobra.Command{
		Use: "create", Short: "Create an API key for a tenant; the secret is shown once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			var k keyOut
			in := map[string]any{"tenant": tenant, "models": models}
			if name != "" {
				in["name"] = name
			}
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/keys", in, &k); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created key %s for tenant %s (models: %s)\n\n    export AIFORGE_API_KEY=%s\n\nThe secret is shown only now; aiforge keeps only its hash.\n",
				k.ID, k.Tenant, strings.Join(k.Models, ","), k.Key)
			return nil
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "tenant owning the key (required)")
	create.Flags().StringVar(&name, "name", "", "a label for the key")
	create.Flags().StringSliceVar(&models, "models", []string{"*"}, "models the key may use (comma-separated; * for all)")
	_ = create.MarkFlagRequired("tenant")

	var listTenant string
	list := &cobra.Command{
		Use: "list", Short: "List API keys (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			var out listOut[keyOut]
			path := "/admin/v1/keys"
			if listTenant != "" {
				path += "?tenant=" + listTenant
			}
			if err := cl.Do(cmd.Context(), "GET", path, nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, k := range out.Data {
				rows = append(rows, []string{k.ID, k.Tenant, k.Name, strings.Join(k.Models, ","), k.CreatedAt.Format(time.RFC3339)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"ID", "TENANT", "NAME", "MODELS", "CREATED"}, rows)
			return nil
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "only this tenant's keys")

	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke a key on every edge replica (its open streams end)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/keys/"+args[0], nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(create, list, revoke)
	return c
}

type modelOut struct {
	Name   string `json:"name"`
	Engine struct {
		BaseURL        string `json:"base_url"`
		Model          string `json:"model"`
		APIKey         string `json:"api_key,omitempty"`
		MaxConcurrency int    `json:"max_concurrency,omitempty"`
	} `json:"engine"`
	CreatedAt time.Time `json:"created_at"`
}

func modelsCmd() *cobra.Command {
	c := &cobra.Command{Use: "models", Short: "Manage served models (admin)"}
	var baseURL, upstream, keyEnv string
	var maxConc int
	register := &cobra.Command{
		Use:   "register NAME",
		Short: "Bind a model name to an OpenAI-compatible engine",
		Example: `  aiforge models register chat-small --base-url http://127.0.0.1:8000/v1 --upstream Qwen/Qwen2.5-7B-Instruct   # vLLM / SGLang
  aiforge models register llama --base-url http://127.0.0.1:8081/v1 --upstream llama            # llama.cpp llama-server
  aiforge models register qwen --base-url http://127.0.0.1:11434/v1 --upstream qwen2.5:7b       # Ollama`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			engine := map[string]any{"base_url": baseURL, "model": upstream}
			if keyEnv != "" {
				v := os.Getenv(keyEnv)
				if v == "" {
					return fmt.Errorf("--engine-api-key-env %s: the variable is empty", keyEnv)
				}
				engine["api_key"] = v
			}
			if maxConc > 0 {
				engine["max_concurrency"] = maxConc
			}
			var m modelOut
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/models", map[string]any{"name": args[0], "engine": engine}, &m); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered model %s -> %s (%s)\n", m.Name, m.Engine.BaseURL, m.Engine.Model)
			return nil
		},
	}
	register.Flags().StringVar(&baseURL, "base-url", "", "engine base URL ending in /v1 (required)")
	register.Flags().StringVar(&upstream, "upstream", "", "model name the engine serves (required)")
	register.Flags().StringVar(&keyEnv, "engine-api-key-env", "", "environment variable holding the engine's API key")
	register.Flags().IntVar(&maxConc, "max-concurrency", 0, "requests sent to the engine at once (default 64)")
	_ = register.MarkFlagRequired("base-url")
	_ = register.MarkFlagRequired("upstream")

	list := &cobra.Command{
		Use: "list", Short: "List model bindings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			var out listOut[modelOut]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/models", nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, m := range out.Data {
				rows = append(rows, []string{m.Name, m.Engine.BaseURL, m.Engine.Model, m.CreatedAt.Format(time.RFC3339)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"MODEL", "ENGINE", "UPSTREAM", "CREATED"}, rows)
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Remove a model binding (its workers drain and stop)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient()
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/models/"+args[0], nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted model %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(register, list, del)
	return c
}
