package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

const containersKeyHelp = `They use AIFORGE_API_KEY (the key's tenant owns the containers).`

// exitCodeError ends the process with code and prints nothing more: the
// exit status of code run by `aiforge sandbox exec`.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// execMargin is how much longer than an exec's timeout the CLI waits for
// its answer.
const execMargin = time.Minute

func sandboxCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "sandbox", Short: "Run Python or Bash in an isolated agent sandbox (gVisor)"}, containersKeyHelp)
	var (
		language, code, container, memory string
		keep, stream, asJSON              bool
		timeout                           time.Duration
	)
	exec := &cobra.Command{
		Use:   "exec [FILE]",
		Short: "Run code in a sandbox: stdout and stderr are the code's, and so is the exit status",
		Long: `Run code in a sandbox container: the code comes from -c, a FILE ("-" for stdin), or stdin.
Without --container a container is created for the run and deleted after it (unless --keep).
The code's stdout and stderr are written to this command's, and it exits with the code's exit
status (124 when the code ran past --timeout, 1 when it was stopped for another reason).`,
		Example: `  aiforge sandbox exec --language python -c 'print(1+1)'
  aiforge sandbox exec --language bash --stream script.sh
  echo 'ls /mnt/data' | aiforge sandbox exec --language bash --container cntr_...`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			src, err := execSource(cmd, code, args)
			if err != nil {
				return err
			}
			req := sandbox.ExecRequest{Language: language, Code: src, TimeoutMS: timeout.Milliseconds(), Stream: stream}
			if err := req.Normalize(); err != nil {
				return fmt.Errorf("invalid exec: %w", err)
			}
			ctx := cmd.Context()
			id := container
			if id == "" {
				var c sandbox.Container
				if err := cl.Do(ctx, "POST", "/v1/containers", sandbox.CreateRequest{Name: "aiforge-sandbox-exec", MemoryLimit: memory}, &c); err != nil {
					return fmt.Errorf("create a container: %w", err)
				}
				id = c.ID
				if keep {
					fmt.Fprintf(cmd.ErrOrStderr(), "container %s kept\n", id)
				} else {
					defer func() {
						// Deleted even when the command was interrupted.
						dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
						defer cancel()
						if err := cl.Do(dctx, "DELETE", "/v1/containers/"+url.PathEscape(id), nil, nil); err != nil {
							fmt.Fprintf(cmd.ErrOrStderr(), "warning: container %s was not deleted: %v\n", id, err)
						}
					}()
				}
			}
			xc := &cli.Client{BaseURL: cl.BaseURL, Token: cl.Token, HTTP: &http.Client{Timeout: time.Duration(req.TimeoutMS)*time.Millisecond + execMargin}}
			var res sandbox.ExecResult
			if stream {
				res, err = execStream(ctx, xc, id, req, cmd.OutOrStdout(), cmd.ErrOrStderr())
			} else {
				err = xc.Do(ctx, "POST", "/v1/containers/"+url.PathEscape(id)+"/exec", req, &res)
				if err == nil && !asJSON {
					_, _ = io.WriteString(cmd.OutOrStdout(), res.Stdout)
					_, _ = io.WriteString(cmd.ErrOrStderr(), res.Stderr)
				}
			}
			if err != nil {
				return err
			}
			if asJSON {
				if err := cli.JSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			}
			return execExit(cmd.ErrOrStderr(), res)
		},
	}
	exec.Flags().StringVarP(&language, "language", "l", sandbox.LanguagePython, "python or bash")
	exec.Flags().StringVarP(&code, "code", "c", "", "the code to run (instead of FILE or stdin)")
	exec.Flags().StringVar(&container, "container", "", "run in this container (default: a new one, deleted after the run)")
	exec.Flags().StringVar(&memory, "memory-limit", sandbox.DefaultMemoryLimit, "memory of a new container: "+strings.Join(sandbox.MemoryLimits, ", "))
	exec.Flags().BoolVar(&keep, "keep", false, "keep the container this command created (its id is printed on stderr)")
	exec.Flags().BoolVar(&stream, "stream", false, "stream the output as the code runs")
	exec.Flags().DurationVar(&timeout, "timeout", sandbox.DefaultTimeout, "wall-clock limit of the code (at most "+sandbox.MaxTimeout.String()+")")
	exec.Flags().BoolVar(&asJSON, "json", false, "print the exec result as JSON instead of the output")
	c.AddCommand(exec)
	return c
}

// execSource is the code to run: -c, the FILE argument ("-" is stdin), or
// stdin, at most sandbox.MaxCodeBytes.
func execSource(cmd *cobra.Command, code string, args []string) (string, error) {
	if code != "" {
		if len(args) > 0 {
			return "", errors.New("give the code with -c or as a FILE, not both")
		}
		return code, nil
	}
	var r io.Reader = cmd.InOrStdin()
	name := "stdin"
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return "", err
		}
		defer f.Close()
		r, name = f, args[0]
	}
	b, err := io.ReadAll(io.LimitReader(r, sandbox.MaxCodeBytes+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > sandbox.MaxCodeBytes {
		return "", fmt.Errorf("%s holds more than %d bytes of code", name, sandbox.MaxCodeBytes)
	}
	return string(b), nil
}

// execExit is the exit status of a run: the code's, or 124 for a timeout
// and 1 for another stop, said on stderr.
func execExit(stderr io.Writer, res sandbox.ExecResult) error {
	code := res.ExitCode
	if res.Error != nil {
		fmt.Fprintf(stderr, "aiforge: %s: %s\n", res.Error.Code, res.Error.Message)
		if code <= 0 {
			code = 1
			if res.Error.Code == sandbox.CodeExecTimeout {
				code = 124
			}
		}
	}
	if code < 0 || code > 255 {
		code = 1
	}
	if code != 0 {
		return &exitCodeError{code: code}
	}
	return nil
}

// apiError reads an error answer in OpenAI's shape.
func apiError(status int, body []byte) error {
	if e, ok := contracts.ParseError(status, body); ok {
		return &cli.APIError{Status: status, Code: e.Code, Message: e.Message, Param: e.Param}
	}
	return &cli.APIError{Status: status, Message: strings.TrimSpace(string(bytes.TrimSpace(body[:min(len(body), 512)])))}
}

// execStream runs a streamed exec, writing the chunks as they come.
func execStream(ctx context.Context, cl *cli.Client, id string, req sandbox.ExecRequest, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(cl.BaseURL, "/")+"/v1/containers/"+url.PathEscape(id)+"/exec", bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+cl.Token)
	resp, err := cl.HTTP.Do(hr)
	if err != nil {
		return res, fmt.Errorf("cannot reach aiforge at %s: %w", cl.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return res, apiError(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case line == "data: [DONE]":
			return res, errors.New("the stream ended without a result")
		case strings.HasPrefix(line, "data: "):
			data := []byte(strings.TrimPrefix(line, "data: "))
			switch event {
			case sandbox.EventStdout, sandbox.EventStderr:
				var ch sandbox.ExecChunk
				if err := json.Unmarshal(data, &ch); err != nil {
					return res, fmt.Errorf("bad stream event: %w", err)
				}
				w := stdout
				if event == sandbox.EventStderr {
					w = stderr
				}
				_, _ = io.WriteString(w, ch.Data)
			case sandbox.EventDone:
				if err := json.Unmarshal(data, &res); err != nil {
					return res, fmt.Errorf("bad result event: %w", err)
				}
				return res, nil
			case sandbox.EventError:
				var e struct{ Code, Message, Param string }
				_ = json.Unmarshal(data, &e)
				return res, &cli.APIError{Status: http.StatusOK, Code: e.Code, Message: e.Message, Param: e.Param}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, errors.New("the stream ended without a result")
}

func containersCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "containers", Short: "Manage sandbox containers and their files (OpenAI's Containers API)"}, containersKeyHelp)

	var name, memory string
	var minutes int
	var fileIDs []string
	createJSON := false
	create := &cobra.Command{
		Use: "create", Short: "Create a container", Args: cobra.NoArgs,
		Example: "  aiforge containers create --name analysis --memory-limit 4g --file-id file-...",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			req := sandbox.CreateRequest{Name: name, MemoryLimit: memory, FileIDs: fileIDs}
			if minutes > 0 {
				req.ExpiresAfter = &sandbox.ExpiresAfter{Anchor: "last_active_at", Minutes: minutes}
			}
			var out sandbox.Container
			if err := cl.Do(cmd.Context(), "POST", "/v1/containers", req, &out); err != nil {
				return err
			}
			if createJSON {
				return cli.JSON(cmd.OutOrStdout(), out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created container %s (%s, expires %d minutes after its last use)\n", out.ID, out.MemoryLimit, out.ExpiresAfter.Minutes)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "the container's name")
	create.Flags().StringVar(&memory, "memory-limit", "", "memory: "+strings.Join(sandbox.MemoryLimits, ", ")+" (default "+sandbox.DefaultMemoryLimit+")")
	create.Flags().IntVar(&minutes, "expires-minutes", 0, fmt.Sprintf("idle minutes before it expires (default %d)", sandbox.DefaultExpiresMinutes))
	create.Flags().Var((*repeated)(&fileIDs), "file-id", "a file (aiforge's Files API) to copy into the container (repeatable)")
	create.Flags().BoolVar(&createJSON, "json", false, "print the container as JSON")

	var limit int
	var after, byName string
	listJSON := false
	list := &cobra.Command{
		Use: "list", Short: "List your tenant's containers, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if after != "" {
				q.Set("after", after)
			}
			if byName != "" {
				q.Set("name", byName)
			}
			var page sandbox.List[sandbox.Container]
			if err := cl.Do(cmd.Context(), "GET", "/v1/containers?"+q.Encode(), nil, &page); err != nil {
				return err
			}
			if listJSON {
				return cli.JSON(cmd.OutOrStdout(), page)
			}
			rows := [][]string{}
			for _, c := range page.Data {
				rows = append(rows, []string{c.ID, c.Name, c.Status, c.MemoryLimit, unixTime(&c.CreatedAt), unixTime(&c.LastActiveAt)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"ID", "NAME", "STATUS", "MEMORY", "CREATED", "LAST ACTIVE"}, rows)
			if page.HasMore {
				fmt.Fprintf(cmd.OutOrStdout(), "\nmore: aiforge containers list --after %s\n", page.LastID)
			}
			return nil
		},
	}
	list.Flags().IntVar(&limit, "limit", 20, "containers per page (1-100)")
	list.Flags().StringVar(&after, "after", "", "list the containers after this id")
	list.Flags().StringVar(&byName, "name", "", "only containers of this name")
	list.Flags().BoolVar(&listJSON, "json", false, "print JSON")

	get := &cobra.Command{
		Use: "get ID", Short: "Show a container as JSON", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			var out sandbox.Container
			if err := cl.Do(cmd.Context(), "GET", "/v1/containers/"+url.PathEscape(args[0]), nil, &out); err != nil {
				return err
			}
			return cli.JSON(cmd.OutOrStdout(), out)
		},
	}
	del := &cobra.Command{
		Use: "delete ID", Short: "Delete a container and its files", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/v1/containers/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted container %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(create, list, get, del, containerFilesCmd())
	return c
}

func filesPath(container string, rest ...string) string {
	p := "/v1/containers/" + url.PathEscape(container) + "/files"
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

func containerFilesCmd() *cobra.Command {
	c := &cobra.Command{Use: "files", Short: "Upload, list, download and delete a container's files (under " + sandbox.DataDir + ")"}
	var asName, fileID string
	upload := &cobra.Command{
		Use: "upload CONTAINER [FILE]", Short: "Upload a local file into a container, or copy one of your files there with --file-id", Args: cobra.RangeArgs(1, 2),
		Example: "  aiforge containers files upload cntr_... data.csv\n  aiforge containers files upload cntr_... --file-id file-...",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			var f sandbox.File
			switch {
			case fileID != "" && len(args) == 2, fileID == "" && len(args) == 1:
				return errors.New("give a FILE to upload or --file-id, one of the two")
			case fileID != "":
				err = cl.Do(cmd.Context(), "POST", filesPath(args[0]), map[string]string{"file_id": fileID}, &f)
			default:
				f, err = uploadContainerFile(cmd.Context(), cl, args[0], args[1], asName)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s)\n", f.ID, f.Path, cli.HumanBytes(f.Bytes))
			return nil
		},
	}
	upload.Flags().StringVar(&asName, "as", "", "the file's name in the container (default: the local file's name)")
	upload.Flags().StringVar(&fileID, "file-id", "", "copy this file of the Files API instead")

	listJSON := false
	list := &cobra.Command{
		Use: "list CONTAINER", Short: "List a container's files", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			var page sandbox.List[sandbox.File]
			if err := cl.Do(cmd.Context(), "GET", filesPath(args[0])+"?limit=100", nil, &page); err != nil {
				return err
			}
			if listJSON {
				return cli.JSON(cmd.OutOrStdout(), page)
			}
			rows := [][]string{}
			for _, f := range page.Data {
				rows = append(rows, []string{f.ID, f.Path, strconv.FormatInt(f.Bytes, 10), f.Source, unixTime(&f.CreatedAt)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"ID", "PATH", "BYTES", "SOURCE", "CREATED"}, rows)
			return nil
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print JSON")

	var out string
	download := &cobra.Command{
		Use: "download CONTAINER FILE_ID", Short: "Download a container's file", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			dest := out
			if dest == "" {
				var f sandbox.File
				if err := cl.Do(cmd.Context(), "GET", filesPath(args[0], args[1]), nil, &f); err != nil {
					return err
				}
				dest = path.Base(f.Path)
				if dest == "/" || dest == "." || dest == "" {
					dest = args[1]
				}
			}
			dl := &cli.Client{BaseURL: cl.BaseURL, Token: cl.Token}
			if dest == "-" {
				return dl.Stream(cmd.Context(), "GET", filesPath(args[0], args[1], "content"), cmd.OutOrStdout())
			}
			tmp, err := os.CreateTemp(filepath.Dir(dest), ".download-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			err = dl.Stream(cmd.Context(), "GET", filesPath(args[0], args[1], "content"), tmp)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), dest); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s -> %s\n", args[1], dest)
			return nil
		},
	}
	download.Flags().StringVarP(&out, "out", "o", "", `where to write it ("-": stdout; default: the file's name, here)`)

	del := &cobra.Command{
		Use: "delete CONTAINER FILE_ID", Short: "Delete a container's file", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", filesPath(args[0], args[1]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", args[1])
			return nil
		},
	}
	c.AddCommand(upload, list, download, del)
	return c
}

// uploadContainerFile streams a local file as multipart/form-data.
func uploadContainerFile(ctx context.Context, cl *cli.Client, container, local, name string) (sandbox.File, error) {
	var f sandbox.File
	src, err := os.Open(local)
	if err != nil {
		return f, err
	}
	defer src.Close()
	if name == "" {
		name = filepath.Base(local)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", name)
		if err == nil {
			_, err = io.Copy(part, src)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(cl.BaseURL, "/")+filesPath(container), pr)
	if err != nil {
		return f, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+cl.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return f, fmt.Errorf("cannot reach aiforge at %s: %w", cl.BaseURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return f, apiError(resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("decode answer: %w", err)
	}
	return f, nil
}
