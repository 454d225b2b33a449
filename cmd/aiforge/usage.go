package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/query"
)

func usageCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "usage", Short: "Usage reports, audit and export"},
		"report uses AIFORGE_ADMIN_KEY (every tenant) or else AIFORGE_API_KEY (that key's tenant); audit and export need AIFORGE_ADMIN_KEY.")
	c.AddCommand(usageReportCmd(), usageAuditCmd(), usageExportCmd())
	return c
}

// reportClient uses the admin key when set, else a tenant API key (which
// sees only its own tenant).
func reportClient(cmd *cobra.Command) (*cli.Client, error) {
	key := os.Getenv("AIFORGE_ADMIN_KEY")
	if key == "" {
		key = os.Getenv("AIFORGE_API_KEY")
	}
	if key == "" {
		return nil, fmt.Errorf("set AIFORGE_ADMIN_KEY (every tenant) or AIFORGE_API_KEY (your tenant)")
	}
	return &cli.Client{BaseURL: apiURL(cmd), Token: key}, nil
}

func parseWhen(v string, def time.Time) (time.Time, error) {
	if v == "" {
		return def, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil {
			return time.Now().AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil {
		return time.Now().Add(-d), nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, v)
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func usageReportCmd() *cobra.Command {
	var from, to, bucket, groupBy, kind string
	var asCSV bool
	c := &cobra.Command{
		Use:   "report",
		Short: "Print usage per bucket as a table and a per-day bar chart (or CSV)",
		Example: `  aiforge usage report --from 7d --group-by model
  aiforge usage report --from 2026-11-01 --to 2026-12-01 --bucket 1d --group-by project_id,model --csv > november.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := reportClient(cmd)
			if err != nil {
				return err
			}
			start, err := parseWhen(from, time.Now().Add(-7*24*time.Hour))
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			end, err := parseWhen(to, time.Now())
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			q := url.Values{}
			q.Set("start_time", strconv.FormatInt(start.Unix(), 10))
			q.Set("end_time", strconv.FormatInt(end.Unix(), 10))
			q.Set("bucket_width", bucket)
			for _, g := range strings.Split(groupBy, ",") {
				if g != "" {
					q.Add("group_by", g)
				}
			}
			limits := map[string]string{"1d": "31", "1h": "168", "1m": "1440"}
			q.Set("limit", limits[bucket])
			out := cmd.OutOrStdout()
			layout := "2006-01-02"
			if bucket != "1d" {
				layout = "2006-01-02 15:04"
			}
			if kind == kindSandbox {
				rows, err := sandboxRows(cmd, cl, q, groupBy)
				if err != nil {
					return err
				}
				if asCSV {
					return sandboxCSV(out, rows)
				}
				cli.Table(out, sandboxHead, sandboxTable(rows, layout))
				return nil
			}
			type row struct {
				start                           time.Time
				project, key, model             string
				requests, input, cached, output int64
				batch                           string
			}
			var rows []row
			page := ""
			for {
				if page != "" {
					q.Set("page", page)
				}
				// An embeddings page decodes too: its results are a subset.
				var p ledger.Page[ledger.CompletionsResult]
				if err := cl.Do(cmd.Context(), http.MethodGet, "/v1/organization/usage/"+kind+"?"+q.Encode(), nil, &p); err != nil {
					return err
				}
				for _, b := range p.Data {
					for _, r := range b.Results {
						batch := ""
						if r.Batch != nil {
							batch = strconv.FormatBool(*r.Batch)
						}
						rows = append(rows, row{time.Unix(b.StartTime, 0).UTC(), str(r.ProjectID), str(r.APIKeyID), str(r.Model),
							r.NumModelRequests, r.InputTokens, r.InputCachedTokens, r.OutputTokens, batch})
					}
				}
				if !p.HasMore || p.NextPage == nil {
					break
				}
				page = *p.NextPage
			}
			costs := map[string]float64{}
			if bucket == "1d" {
				cq := url.Values{"start_time": {q.Get("start_time")}, "end_time": {q.Get("end_time")}, "bucket_width": {"1d"}, "limit": {"31"}}
				page = ""
				for {
					if page != "" {
						cq.Set("page", page)
					}
					var p ledger.Page[ledger.CostsResult]
					if err := cl.Do(cmd.Context(), http.MethodGet, "/v1/organization/costs?"+cq.Encode(), nil, &p); err != nil {
						return err
					}
					for _, b := range p.Data {
						for _, r := range b.Results {
							costs[time.Unix(b.StartTime, 0).UTC().Format("2006-01-02")] += r.Amount.Value
						}
					}
					if !p.HasMore || p.NextPage == nil {
						break
					}
					page = *p.NextPage
				}
			}
			byBatch := slices.Contains(strings.Split(groupBy, ","), "batch")
			if asCSV {
				w := csv.NewWriter(out)
				head := []string{"bucket_start", "project_id", "api_key_id", "model", "requests", "input_tokens", "input_cached_tokens", "output_tokens"}
				if byBatch {
					head = append(head, "batch")
				}
				_ = w.Write(head)
				for _, r := range rows {
					rec := []string{r.start.Format(time.RFC3339), r.project, r.key, r.model, strconv.FormatInt(r.requests, 10),
						strconv.FormatInt(r.input, 10), strconv.FormatInt(r.cached, 10), strconv.FormatInt(r.output, 10)}
					if byBatch {
						rec = append(rec, r.batch)
					}
					_ = w.Write(rec)
				}
				w.Flush()
				return w.Error()
			}
			var table [][]string
			for _, r := range rows {
				if r.requests == 0 && r.input == 0 && r.output == 0 {
					continue
				}
				rec := []string{r.start.Format(layout), r.project, r.key, r.model, strconv.FormatInt(r.requests, 10),
					strconv.FormatInt(r.input, 10), strconv.FormatInt(r.cached, 10), strconv.FormatInt(r.output, 10)}
				if byBatch {
					rec = append(rec, r.batch)
				}
				table = append(table, rec)
			}
			head := []string{"BUCKET", "PROJECT", "API KEY", "MODEL", "REQUESTS", "INPUT", "CACHED", "OUTPUT"}
			if byBatch {
				head = append(head, "BATCH")
			}
			cli.Table(out, head, table)
			// Per-day totals as bars.
			days := map[string]int64{}
			var order []string
			for _, r := range rows {
				d := r.start.Format("2006-01-02")
				if _, ok := days[d]; !ok {
					order = append(order, d)
				}
				days[d] += r.input + r.output
			}
			fmt.Fprintln(out)
			fmt.Fprintln(out, "tokens per day")
			barChart(out, order, days, costs)
			// The agent code sandboxes, when they were used.
			sbx, err := sandboxRows(cmd, cl, q, groupBy)
			var ae *cli.APIError
			if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				return nil // an edge from before sandboxes
			}
			if err != nil {
				return err
			}
			if table := sandboxTable(sbx, layout); len(table) > 0 {
				fmt.Fprintln(out)
				fmt.Fprintln(out, "code interpreter (agent code sandboxes)")
				cli.Table(out, sandboxHead, table)
			}
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "start: a date (2026-11-01), RFC 3339, unix seconds, or how long ago (7d, 36h); default 7d")
	c.Flags().StringVar(&to, "to", "", "end (default now)")
	c.Flags().StringVar(&bucket, "bucket", "1d", "bucket width: 1m, 1h or 1d")
	c.Flags().StringVar(&groupBy, "group-by", "model", "comma-separated: project_id, api_key_id, model, batch (completions only: batch lines apart from real-time requests)")
	c.Flags().StringVar(&kind, "kind", "completions", "completions, embeddings or "+kindSandbox+" (the agent code sandboxes: sessions, execs, seconds, GB-seconds; grouped by project_id, api_key_id)")
	c.Flags().BoolVar(&asCSV, "csv", false, "print CSV instead of the table and chart")
	return c
}

// kindSandbox is the report of the agent code sandboxes.
const kindSandbox = "code_interpreter_sessions"

// sandboxRow is one result of the code_interpreter_sessions report.
type sandboxRow struct {
	start time.Time
	ledger.CodeInterpreterSessionsResult
}

// sandboxRows reads every page of the code_interpreter_sessions report for
// the token report's window, grouped by what of groupBy it takes
// (project_id, api_key_id).
func sandboxRows(cmd *cobra.Command, cl *cli.Client, tokenQuery url.Values, groupBy string) ([]sandboxRow, error) {
	q := url.Values{}
	for _, k := range []string{"start_time", "end_time", "bucket_width", "limit"} {
		q.Set(k, tokenQuery.Get(k))
	}
	for _, g := range strings.Split(groupBy, ",") {
		if g == "project_id" || g == "api_key_id" {
			q.Add("group_by", g)
		}
	}
	var rows []sandboxRow
	page := ""
	for {
		if page != "" {
			q.Set("page", page)
		}
		var p ledger.Page[ledger.CodeInterpreterSessionsResult]
		if err := cl.Do(cmd.Context(), http.MethodGet, "/v1/organization/usage/"+kindSandbox+"?"+q.Encode(), nil, &p); err != nil {
			return nil, err
		}
		for _, b := range p.Data {
			for _, r := range b.Results {
				rows = append(rows, sandboxRow{time.Unix(b.StartTime, 0).UTC(), r})
			}
		}
		if !p.HasMore || p.NextPage == nil {
			return rows, nil
		}
		page = *p.NextPage
	}
}

var sandboxHead = []string{"BUCKET", "PROJECT", "API KEY", "SESSIONS", "EXECS", "ERRORS", "WALL S", "CPU S", "GB-S"}

// sandboxTable is the table rows of the buckets with sandbox usage.
func sandboxTable(rows []sandboxRow, layout string) [][]string {
	var table [][]string
	for _, r := range rows {
		if r.NumSessions == 0 && r.NumExecs == 0 {
			continue
		}
		table = append(table, []string{r.start.Format(layout), str(r.ProjectID), str(r.APIKeyID),
			strconv.FormatInt(r.NumSessions, 10), strconv.FormatInt(r.NumExecs, 10), strconv.FormatInt(r.NumExecErrors, 10),
			seconds(r.WallSeconds), seconds(r.CPUSeconds), seconds(r.GBSeconds)})
	}
	return table
}

func seconds(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func sandboxCSV(out io.Writer, rows []sandboxRow) error {
	w := csv.NewWriter(out)
	_ = w.Write([]string{"bucket_start", "project_id", "api_key_id", "sessions", "execs", "exec_errors", "wall_seconds", "cpu_seconds",
		"gb_seconds", "session_seconds", "session_gb_seconds"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range rows {
		_ = w.Write([]string{r.start.Format(time.RFC3339), str(r.ProjectID), str(r.APIKeyID), strconv.FormatInt(r.NumSessions, 10),
			strconv.FormatInt(r.NumExecs, 10), strconv.FormatInt(r.NumExecErrors, 10), f(r.WallSeconds), f(r.CPUSeconds),
			f(r.GBSeconds), f(r.SessionSeconds), f(r.SessionGBSeconds)})
	}
	w.Flush()
	return w.Error()
}

func barChart(w io.Writer, order []string, values map[string]int64, costs map[string]float64) {
	var peak int64
	for _, d := range order {
		peak = max(peak, values[d])
	}
	const width = 40
	for _, d := range order {
		n := 0
		if peak > 0 {
			n = int(values[d] * width / peak)
		}
		if values[d] > 0 && n == 0 {
			n = 1
		}
		line := fmt.Sprintf("%s %s%s %d", d, strings.Repeat("█", n), strings.Repeat(" ", width-n), values[d])
		if c, ok := costs[d]; ok {
			line += fmt.Sprintf("  $%.4f", c)
		}
		fmt.Fprintln(w, line)
	}
}

// errAuditDifferences makes the command exit non-zero without an extra line.
var errAuditDifferences = fmt.Errorf("the audit found differences")

// windowQuery reads --from and --to (default: the last 24 hours) as the
// admin usage endpoints' from/to query.
func windowQuery(from, to string) (time.Time, time.Time, url.Values, error) {
	start, err := parseWhen(from, time.Now().Add(-24*time.Hour))
	if err != nil {
		return start, start, nil, fmt.Errorf("--from: %w", err)
	}
	end, err := parseWhen(to, time.Now())
	if err != nil {
		return start, end, nil, fmt.Errorf("--to: %w", err)
	}
	q := url.Values{"from": {strconv.FormatInt(start.Unix(), 10)}, "to": {strconv.FormatInt(end.Unix(), 10)}}
	return start, end, q, nil
}

func usageAuditCmd() *cobra.Command {
	var from, to string
	c := &cobra.Command{
		Use:   "audit",
		Short: "Replay the raw usage stream, recompute the ledgers and compare; exit 1 on any difference",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			start, end, q, err := windowQuery(from, to)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "auditing %s .. %s (replaying the usage stream) ...\n", start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
			var rep query.AuditReply
			if err := cl.Do(cmd.Context(), http.MethodPost, "/admin/v1/usage/audit?"+q.Encode(), nil, &rep); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "events replayed:   %d (%.0f events/s)\n", rep.EventsReplayed, rep.EventsPerSecond)
			fmt.Fprintf(out, "buckets compared:  %d\n", rep.BucketsCompared)
			fmt.Fprintf(out, "differences:       %d\n", len(rep.Differences))
			for _, d := range rep.Differences {
				b, err := json.Marshal(d)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "  %s\n", b)
			}
			if len(rep.Differences) > 0 {
				cmd.SilenceErrors = false
				return errAuditDifferences
			}
			fmt.Fprintln(out, "ledgers match the usage stream")
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "window start (default 24 hours ago)")
	c.Flags().StringVar(&to, "to", "", "window end (default now)")
	return c
}

func usageExportCmd() *cobra.Command {
	var from, to, tenant string
	c := &cobra.Command{
		Use:   "export",
		Short: "Write raw usage events as CloudEvents (JSON lines) for billing systems",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			_, _, q, err := windowQuery(from, to)
			if err != nil {
				return err
			}
			if tenant != "" {
				q.Set("tenant", tenant)
			}
			return cl.Stream(cmd.Context(), http.MethodGet, "/admin/v1/usage/events?"+q.Encode(), cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&from, "from", "", "window start (default 24 hours ago)")
	c.Flags().StringVar(&to, "to", "", "window end (default now)")
	c.Flags().StringVar(&tenant, "tenant", "", "only this tenant's events")
	return c
}
