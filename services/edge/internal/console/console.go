// Package console serves the operators' web console at /console: models
// with their worker state and catalog verdicts, tenants and keys (create,
// revoke, limits, spend), usage charts, batches, vector stores, sandboxes
// and dead letters.
//
// Pages are rendered on the server with html/template (every name a
// tenant chose is escaped), with one small script for the charts and no
// build step; everything is embedded. Operators sign in with the edge's
// admin key, which is checked once and never put in a page, a URL, a
// cookie or a log: the session cookie is a signed random id (see
// sessions), and every form that changes something carries the session's
// CSRF token on top of the cookie's SameSite=Strict.
//
// What the console shows and changes goes through the edge's own admin and
// report APIs, called in process (see api.go); what those do not list
// across tenants (batches, vector stores, containers) is read from the
// same buckets the tenant APIs read, and dead letters from the
// DEADLETTER stream, a bounded number at a time.
package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Deps are what the console needs.
type Deps struct {
	// API is the edge's API handler (its mux): the console calls the admin
	// and report APIs on it in process, with AdminKey.
	API      http.Handler
	AdminKey string
	// Batches, VectorStores, VectorStoreFiles and Containers are the
	// buckets of those records (events.BucketBatches,
	// events.BucketVectorStores, events.BucketVectorStoreFiles,
	// events.BucketContainers); a nil one shows its page as unavailable.
	Batches, VectorStores, VectorStoreFiles, Containers jetstream.KeyValue
	// JS reads the dead letters (events.StreamDeadLetter).
	JS     jetstream.JetStream
	Logger *slog.Logger
	// SecureCookies marks the session cookie Secure even on plain HTTP
	// requests: for an edge behind a TLS-terminating proxy. A request that
	// came over TLS always gets a Secure cookie.
	SecureCookies bool
	// SessionTTL is how long a sign-in lasts. Default 8h.
	SessionTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Service is the console.
type Service struct {
	d        Deps
	log      *slog.Logger
	sessions *sessions
	logins   *loginLimiter
	pages    map[string]*template.Template
}

// Login bounds: 10 failed sign-ins, then one more every 6 seconds.
const (
	loginBurst    = 10
	loginInterval = 6 * time.Second
)

// New builds the console.
func New(d Deps) (*Service, error) {
	if d.API == nil || len(d.AdminKey) < 16 {
		return nil, errors.New("console: Deps.API and an admin key of at least 16 characters are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.SessionTTL <= 0 {
		d.SessionTTL = 8 * time.Hour
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Service{d: d, log: d.Logger.With("domain", "console"), sessions: newSessions(d.AdminKey, d.SessionTTL, d.Now),
		logins: newLoginLimiter(loginBurst, loginInterval, d.Now), pages: pages}, nil
}

// pageNames are the pages, each a template of its own over layout.html.
var pageNames = []string{"login", "models", "tenants", "usage", "batches", "vectorstores", "sandboxes", "deadletters"}

// navItem is one link of the navigation.
type navItem struct{ Path, Label string }

var nav = []navItem{{"models", "Models"}, {"tenants", "Tenants & keys"}, {"usage", "Usage"}, {"batches", "Batches"},
	{"vectorstores", "Vector stores"}, {"sandboxes", "Sandboxes"}, {"deadletters", "Dead letters"}}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"usd":      func(v float64) string { return formatUSD(v) },
		"unix":     func(v int64) string { return formatUnix(v) },
		"time":     func(t time.Time) string { return formatTime(t) },
		"join":     strings.Join,
		"deref":    func(p *float64) float64 { return derefF(p) },
		"pct":      func(n, d int64) int64 { return pct(n, d) },
		"nonempty": func(s string) bool { return s != "" },
		"navItems": func() []navItem { return nav },
		"done":     batchDone,
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// Routes mounts the console under /console.
func (s *Service) Routes(mux *http.ServeMux) {
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/console/static/", http.FileServerFS(static))
	mux.Handle("GET /console/static/", headers(files))
	mux.HandleFunc("GET /console", s.redirectHome)
	mux.HandleFunc("GET /console/{$}", s.redirectHome)
	mux.HandleFunc("GET /console/login", s.loginPage)
	mux.HandleFunc("POST /console/login", s.login)
	mux.HandleFunc("POST /console/logout", s.form(s.logout))
	mux.HandleFunc("GET /console/models", s.page(s.modelsPage))
	mux.HandleFunc("GET /console/tenants", s.page(s.tenantsPage))
	mux.HandleFunc("POST /console/tenants", s.form(s.createTenant))
	mux.HandleFunc("POST /console/tenants/{id}/limits", s.form(s.tenantLimits))
	mux.HandleFunc("POST /console/keys", s.form(s.createKey))
	mux.HandleFunc("POST /console/keys/{id}/revoke", s.form(s.revokeKey))
	mux.HandleFunc("POST /console/keys/{id}/limits", s.form(s.keyLimits))
	mux.HandleFunc("GET /console/usage", s.page(s.usagePage))
	mux.HandleFunc("GET /console/batches", s.page(s.batchesPage))
	mux.HandleFunc("GET /console/vectorstores", s.page(s.vectorStoresPage))
	mux.HandleFunc("GET /console/sandboxes", s.page(s.sandboxesPage))
	mux.HandleFunc("GET /console/deadletters", s.page(s.deadLettersPage))
}

// headers are the security headers of every console answer: no framing,
// scripts and styles from the console only (no inline script, so an
// escaped name that slipped through could still not run), no caching of
// pages that show spend and secrets, no referrer to other sites (with
// no-referrer at all, browsers send "Origin: null" on the forms).
func headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		h.ServeHTTP(w, r)
	})
}

func setHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
}

func (s *Service) redirectHome(w http.ResponseWriter, r *http.Request) {
	setHeaders(w)
	http.Redirect(w, r, "/console/models", http.StatusSeeOther)
}

// secure reports whether the session cookie must be Secure.
// X-Forwarded-Proto is believed for this only: a client that lies about
// it only makes its own cookie stricter.
func (s *Service) secure(r *http.Request) bool {
	return r.TLS != nil || s.d.SecureCookies || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// sessionOf returns the request's session.
func (s *Service) sessionOf(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	sess, err := s.sessions.check(c.Value)
	return sess, err == nil
}

// view is what every page template gets.
type view struct {
	Title  string
	Nav    string
	CSRF   string
	Notice string
	// Secret is a key's secret, shown once right after it was created.
	Secret string
	Error  string
	Data   any
}

// page serves a signed-in page: fill returns its data, or an error shown
// on the page.
func (s *Service) page(fill func(r *http.Request) (string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		sess, ok := s.sessionOf(r)
		if !ok {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		name, data, err := fill(r)
		v := view{CSRF: sess.CSRF, Nav: name, Title: name, Data: data, Notice: bounded(r.URL.Query().Get("notice"), 300)}
		if err != nil {
			v.Error = s.shown(err, name)
		}
		if e := r.URL.Query().Get("error"); e != "" && v.Error == "" {
			v.Error = bounded(e, 300)
		}
		s.render(w, http.StatusOK, name, v)
	}
}

// shown is the text of an error for a page; failures that are not the
// API's own answers are logged and shown briefly.
func (s *Service) shown(err error, what string) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Message
	}
	s.log.Warn("console page", "page", what, "err", err)
	return "Could not read everything for this page: " + bounded(err.Error(), 300)
}

func (s *Service) render(w http.ResponseWriter, status int, name string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := s.pages[name].ExecuteTemplate(&b, "layout.html", v); err != nil {
		s.log.Error("console template", "page", name, "err", err)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// maxForm bounds a form body.
const maxForm = 64 << 10

// form serves a signed-in POST: the session's CSRF token must come with
// it, and the request must not come from another origin.
func (s *Service) form(h func(w http.ResponseWriter, r *http.Request, sess session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		sess, ok := s.sessionOf(r)
		if !ok {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "The form could not be read.", http.StatusBadRequest)
			return
		}
		if !sameOrigin(r) || !validCSRF(sess, r.PostForm.Get("csrf")) {
			http.Error(w, "The form's CSRF token is missing or wrong: reload the page and try again.", http.StatusForbidden)
			return
		}
		h(w, r, sess)
	}
}

// sameOrigin refuses a request whose Origin (or, without one, Referer) is
// another site; browsers send Origin on every cross-site POST.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" {
		if src = r.Header.Get("Referer"); src == "" {
			return true // the CSRF token and SameSite=Strict still hold
		}
	}
	u, err := url.Parse(src)
	return err == nil && u.Host != "" && u.Host == r.Host
}

// back redirects to page with a notice or an error.
func back(w http.ResponseWriter, r *http.Request, page, notice string, err error) {
	q := url.Values{}
	if err != nil {
		var ae *apiError
		msg := "The change failed."
		if errors.As(err, &ae) {
			msg = ae.Message
		}
		q.Set("error", bounded(msg, 300))
	} else if notice != "" {
		q.Set("notice", notice)
	}
	target := page
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (s *Service) loginPage(w http.ResponseWriter, r *http.Request) {
	setHeaders(w)
	if _, ok := s.sessionOf(r); ok {
		http.Redirect(w, r, "/console/models", http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "login", view{Title: "Sign in", Nav: "login"})
}

func (s *Service) login(w http.ResponseWriter, r *http.Request) {
	setHeaders(w)
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil || !sameOrigin(r) {
		s.render(w, http.StatusBadRequest, "login", view{Title: "Sign in", Nav: "login", Error: "The sign-in form could not be read."})
		return
	}
	if !s.logins.allowed() {
		s.log.Warn("console sign-in refused: too many failed attempts")
		s.render(w, http.StatusTooManyRequests, "login", view{Title: "Sign in", Nav: "login", Error: "Too many failed sign-ins; wait a minute and try again."})
		return
	}
	if !httpapi.ConstantEqual(r.PostForm.Get("key"), s.d.AdminKey) {
		s.logins.failed()
		s.log.Warn("console sign-in failed", "remote", r.RemoteAddr)
		s.render(w, http.StatusUnauthorized, "login", view{Title: "Sign in", Nav: "login", Error: "That is not the admin key."})
		return
	}
	value, sess := s.sessions.issue()
	http.SetCookie(w, cookie(value, sess.Expires, s.secure(r)))
	s.log.Info("console sign-in", "remote", r.RemoteAddr, "session_expires", sess.Expires)
	http.Redirect(w, r, "/console/models", http.StatusSeeOther)
}

func (s *Service) logout(w http.ResponseWriter, r *http.Request, sess session) {
	s.sessions.end(sess)
	http.SetCookie(w, cookie("", time.Time{}, s.secure(r)))
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// ctx bounds the reads of one page.
func pageCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 20*time.Second)
}
