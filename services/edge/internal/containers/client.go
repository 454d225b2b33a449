package containers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/telemetry"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

// Codes the edge answers itself, beside pkg/sandbox's.
const (
	// CodeSandboxTimeout: the sandbox service took the request but did
	// not answer within the call's bound (an exec's timeout plus
	// ExecMargin, or CallTimeout).
	CodeSandboxTimeout = "sandbox_timeout"
	// CodeSandboxBadReply: the sandbox service answered something that is
	// not the bus contract.
	CodeSandboxBadReply = "sandbox_bad_reply"
)

// Defaults of ClientConfig.
const (
	DefaultCallTimeout = 60 * time.Second
	DefaultExecMargin  = 15 * time.Second
)

// ClientConfig bounds the client's calls.
type ClientConfig struct {
	// CallTimeout bounds every call but exec: a create (which may copy
	// file_ids into the sandbox) and file copies included. Default 60s.
	CallTimeout time.Duration
	// ExecMargin is added to an exec's own timeout_ms to bound the wait
	// for its answer (the service kills the code at timeout_ms, then
	// answers). Default 15s.
	ExecMargin time.Duration
}

// Client calls the sandbox service over the bus contract of pkg/sandbox:
// core NATS request/reply with the caller's tenant and key in headers,
// create and list to events.SandboxRequest (any replica), everything on one
// container to events.SandboxContainer (the replica that runs it).
type Client struct {
	nc      *nats.Conn
	cfg     ClientConfig
	replies string
}

// NewClient builds a client on nc; its streamed execs receive their chunks
// under events.SandboxReplies of nc's inbox prefix.
func NewClient(nc *nats.Conn, cfg ClientConfig) *Client {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.ExecMargin <= 0 {
		cfg.ExecMargin = DefaultExecMargin
	}
	inbox := nc.Opts.InboxPrefix
	if inbox == "" {
		inbox = strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	return &Client{nc: nc, cfg: cfg, replies: events.SandboxReplies(inbox)}
}

// Caller is who a call is made for: the tenant and key of the API key.
type Caller struct {
	Tenant, KeyID string
}

func (c *Client) msg(ctx context.Context, subject string, who Caller, body any) (*nats.Msg, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Header.Set(bridge.HdrTenant, who.Tenant)
	m.Header.Set(bridge.HdrKeyID, who.KeyID)
	telemetry.Propagator.Inject(ctx, telemetry.NATSCarrier(m.Header))
	m.Data = b
	return m, nil
}

// call sends one request and decodes a 200 reply into out. container is
// the container's id for a call on one container ("" for create and
// list): it decides what "no responders" means.
func (c *Client) call(ctx context.Context, subject, container string, who Caller, timeout time.Duration, in, out any) *contracts.Error {
	m, err := c.msg(ctx, subject, who, in)
	if err != nil {
		return contracts.ErrInternal("The sandbox request could not be encoded.")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return busError(ctx, err, container)
	}
	return decodeReply(reply, out)
}

// decodeReply reads a reply of the contract: HdrStatus 200 and the object,
// or another status and an ErrorBody.
func decodeReply(reply *nats.Msg, out any) *contracts.Error {
	st := reply.Header.Get(sandbox.HdrStatus)
	if st != "" && st != "200" {
		return replyError(st, reply.Data)
	}
	if out != nil {
		if err := json.Unmarshal(reply.Data, out); err != nil {
			return badReply()
		}
	}
	return nil
}

// replyError maps a non-200 reply's ErrorBody to the OpenAI error shape,
// keeping its status, code and param.
func replyError(status string, body []byte) *contracts.Error {
	var eb sandbox.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Code == "" {
		return badReply()
	}
	if eb.Status == 0 {
		eb.Status, _ = strconv.Atoi(status)
	}
	return FromErrorBody(&eb)
}

// FromErrorBody is the API error of a sandbox ErrorBody.
func FromErrorBody(eb *sandbox.ErrorBody) *contracts.Error {
	st := eb.Status
	if st < 400 || st > 599 {
		st = http.StatusBadGateway
	}
	msg := eb.Message
	if msg == "" {
		msg = "The sandbox refused the request (" + eb.Code + ")."
	}
	return &contracts.Error{Status: st, Type: errorType(st), Code: eb.Code, Param: eb.Param, Message: msg}
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return contracts.TypeAuthentication
	case status == http.StatusForbidden:
		return contracts.TypePermission
	case status == http.StatusTooManyRequests:
		return contracts.TypeRateLimit
	case status >= 500:
		return contracts.TypeServer
	}
	return contracts.TypeInvalidRequest
}

func badReply() *contracts.Error {
	return &contracts.Error{Status: http.StatusBadGateway, Type: contracts.TypeServer, Code: CodeSandboxBadReply,
		Message: "The sandbox service answered in a form this edge does not understand."}
}

// ErrContainerNotFound is the answer for a container that does not exist
// for the caller.
func ErrContainerNotFound(id string) *contracts.Error {
	return &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Code: sandbox.CodeContainerNotFound,
		Message: fmt.Sprintf("No such container: %s", boundedID(id))}
}

// ErrSandboxUnavailable is the answer when no sandbox service runs.
func ErrSandboxUnavailable() *contracts.Error {
	return &contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer, Code: sandbox.CodeSandboxUnavailable,
		Message: "No sandbox service is running. Retry later."}
}

func errTimeout() *contracts.Error {
	return &contracts.Error{Status: http.StatusGatewayTimeout, Type: contracts.TypeServer, Code: CodeSandboxTimeout,
		Message: "The sandbox service did not answer in time."}
}

// errClientGone marks a call ended because the caller left; nothing is
// written for it.
var errClientGone = &contracts.Error{Status: 499, Type: contracts.TypeInvalidRequest, Code: "client_closed_request", Message: "The client closed the request."}

// IsClientGone reports whether e says the caller left.
func IsClientGone(e *contracts.Error) bool { return e == errClientGone }

// busError maps a failed request: no responders on a container's subject
// is a container nobody runs (not found), on create and list no sandbox
// service at all.
func busError(ctx context.Context, err error, container string) *contracts.Error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		if container != "" {
			return ErrContainerNotFound(container)
		}
		return ErrSandboxUnavailable()
	case errors.Is(err, context.Canceled):
		return errClientGone
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errClientGone
		}
		return errTimeout()
	}
	return ErrSandboxUnavailable()
}

func boundedID(id string) string {
	if len(id) > 128 {
		return id[:128] + "..."
	}
	return id
}

// ValidID reports whether id can name a container or a container file:
// 1 to 128 letters, digits, '-' and '_'. Any other id is not found.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Create creates a container (req normalized by the caller).
func (c *Client) Create(ctx context.Context, who Caller, req sandbox.CreateRequest) (sandbox.Container, *contracts.Error) {
	var out sandbox.Container
	e := c.call(ctx, events.SandboxRequest(sandbox.OpCreate), "", who, c.cfg.CallTimeout, req, &out)
	return out, e
}

// List lists the caller's tenant's containers.
func (c *Client) List(ctx context.Context, who Caller, req sandbox.ListRequest) (sandbox.List[sandbox.Container], *contracts.Error) {
	var out sandbox.List[sandbox.Container]
	e := c.call(ctx, events.SandboxRequest(sandbox.OpList), "", who, c.cfg.CallTimeout, req, &out)
	return out, e
}

// Get reads a container.
func (c *Client) Get(ctx context.Context, who Caller, id string) (sandbox.Container, *contracts.Error) {
	var out sandbox.Container
	e := c.onContainer(ctx, who, id, sandbox.OpGet, struct{}{}, &out)
	return out, e
}

// Delete deletes a container.
func (c *Client) Delete(ctx context.Context, who Caller, id string) (sandbox.Deleted, *contracts.Error) {
	var out sandbox.Deleted
	e := c.onContainer(ctx, who, id, sandbox.OpDelete, struct{}{}, &out)
	return out, e
}

// File runs a file operation (OpFileCreate, OpFileGet, OpFileDelete,
// OpFileContent) on a container, decoding the reply into out.
func (c *Client) File(ctx context.Context, who Caller, id, op string, req sandbox.FileRequest, out any) *contracts.Error {
	return c.onContainer(ctx, who, id, op, req, out)
}

// ListFiles lists a container's files.
func (c *Client) ListFiles(ctx context.Context, who Caller, id string, req sandbox.ListRequest) (sandbox.List[sandbox.File], *contracts.Error) {
	var out sandbox.List[sandbox.File]
	e := c.onContainer(ctx, who, id, sandbox.OpFileList, req, &out)
	return out, e
}

func (c *Client) onContainer(ctx context.Context, who Caller, id, op string, in, out any) *contracts.Error {
	if !ValidID(id) {
		return ErrContainerNotFound(id)
	}
	return c.call(ctx, events.SandboxContainer(id, op), id, who, c.cfg.CallTimeout, in, out)
}

// execBound is how long the edge waits for an exec's answer.
func (c *Client) execBound(req sandbox.ExecRequest) time.Duration {
	return time.Duration(req.TimeoutMS)*time.Millisecond + c.cfg.ExecMargin
}

// Exec runs code in a container and waits for its result (req normalized
// by the caller, Stream false).
func (c *Client) Exec(ctx context.Context, who Caller, id string, req sandbox.ExecRequest) (sandbox.ExecResult, *contracts.Error) {
	var out sandbox.ExecResult
	if !ValidID(id) {
		return out, ErrContainerNotFound(id)
	}
	req.Stream = false
	e := c.call(ctx, events.SandboxContainer(id, sandbox.OpExec), id, who, c.execBound(req), req, &out)
	return out, e
}

func replyToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// natsStatusHdr and noRespondersStatus are how the server says nobody
// subscribes to a published request's subject (nats.go keeps its
// constants unexported).
const (
	natsStatusHdr      = "Status"
	noRespondersStatus = "503"
)

// ExecStream runs code with its output streamed: onChunk gets every
// stdout and stderr chunk in order, and the result comes once the code
// ended. The chunks go to a subject of this client's own under
// events.SandboxReplies, named by 128 random bits; the request's reply
// subject is the same, so an early refusal (a reply with HdrStatus and an
// ErrorBody) and the server's "no responders" arrive there too. A reply
// with HdrStatus 200 and no event is the final result when it is an
// ExecResult (object container.exec), else an acknowledgement, skipped. The wait is bounded by
// the exec's timeout plus ExecMargin, and ends when ctx does.
func (c *Client) ExecStream(ctx context.Context, who Caller, id string, req sandbox.ExecRequest, onChunk func(sandbox.ExecChunk) error) (sandbox.ExecResult, *contracts.Error) {
	var out sandbox.ExecResult
	if !ValidID(id) {
		return out, ErrContainerNotFound(id)
	}
	req.Stream = true
	subject := c.replies + "." + replyToken()
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		return out, ErrSandboxUnavailable()
	}
	defer func() { _ = sub.Unsubscribe() }()
	m, err := c.msg(ctx, events.SandboxContainer(id, sandbox.OpExec), who, req)
	if err != nil {
		return out, contracts.ErrInternal("The sandbox request could not be encoded.")
	}
	m.Reply = subject
	m.Header.Set(sandbox.HdrStream, subject)
	ctx, cancel := context.WithTimeout(ctx, c.execBound(req))
	defer cancel()
	if err := c.nc.PublishMsg(m); err != nil {
		return out, ErrSandboxUnavailable()
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, busError(ctx, err, id)
		}
		if len(msg.Data) == 0 && msg.Header.Get(natsStatusHdr) == noRespondersStatus {
			return out, ErrContainerNotFound(id)
		}
		switch ev := msg.Header.Get(sandbox.HdrEvent); ev {
		case sandbox.EventStdout, sandbox.EventStderr:
			var ch sandbox.ExecChunk
			if json.Unmarshal(msg.Data, &ch) != nil {
				return out, badReply()
			}
			ch.Type = ev
			if err := onChunk(ch); err != nil {
				return out, errClientGone
			}
		case sandbox.EventDone:
			if json.Unmarshal(msg.Data, &out) != nil {
				return out, badReply()
			}
			return out, nil
		case sandbox.EventError:
			st := msg.Header.Get(sandbox.HdrStatus)
			if st == "" || st == "200" {
				st = "500"
			}
			return out, replyError(st, msg.Data)
		case "":
			st := msg.Header.Get(sandbox.HdrStatus)
			if st != "" && st != "200" {
				return out, replyError(st, msg.Data)
			}
			// The final result as a plain reply, or an acknowledgement.
			var res sandbox.ExecResult
			if json.Unmarshal(msg.Data, &res) == nil && res.Object == sandbox.ObjectExec {
				return res, nil
			}
		default:
			// An event this edge does not know: skipped, so a newer
			// service can add some.
		}
	}
}
