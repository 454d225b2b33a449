package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// cookieName is the console's session cookie.
const cookieName = "aiforge_console"

// sessions issues and checks the console's session cookies. A cookie is a
// random session id and its expiry, signed with a key derived from the
// admin key: any edge replica with the same admin key accepts it (no
// session store to share), rotating the admin key ends every session, and
// the cookie says nothing about the key. Logging out ends the session on
// the replica that answers and forgets its cookie in the browser.
type sessions struct {
	mac [32]byte
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	// ended are logged-out session ids until their expiry.
	ended map[string]time.Time
}

func newSessions(adminKey string, ttl time.Duration, now func() time.Time) *sessions {
	h := hmac.New(sha256.New, []byte(adminKey))
	h.Write([]byte("aiforge console session v1"))
	s := &sessions{ttl: ttl, now: now, ended: map[string]time.Time{}}
	copy(s.mac[:], h.Sum(nil))
	return s
}

// session is a signed-in operator's session.
type session struct {
	ID      string
	Expires time.Time
	// CSRF is the token every state-changing form carries.
	CSRF string
}

var b64 = base64.RawURLEncoding

func (s *sessions) sign(parts ...[]byte) []byte {
	h := hmac.New(sha256.New, s.mac[:])
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func (s *sessions) csrfOf(id []byte) string { return b64.EncodeToString(s.sign([]byte("csrf"), id)) }

// issue starts a session and returns the cookie value.
func (s *sessions) issue() (string, session) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	exp := s.now().Add(s.ttl)
	body := binary.BigEndian.AppendUint64(id, uint64(exp.Unix()))
	v := b64.EncodeToString(body) + "." + b64.EncodeToString(s.sign([]byte("cookie"), body))
	return v, session{ID: b64.EncodeToString(id), Expires: time.Unix(exp.Unix(), 0), CSRF: s.csrfOf(id)}
}

var errNoSession = errors.New("no valid session")

// check returns the session of a cookie value.
func (s *sessions) check(v string) (session, error) {
	bodyPart, sigPart, ok := strings.Cut(v, ".")
	if !ok || len(v) > 200 {
		return session{}, errNoSession
	}
	body, err1 := b64.DecodeString(bodyPart)
	sig, err2 := b64.DecodeString(sigPart)
	if err1 != nil || err2 != nil || len(body) != 24 || !hmac.Equal(sig, s.sign([]byte("cookie"), body)) {
		return session{}, errNoSession
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(body[16:])), 0)
	if !s.now().Before(exp) {
		return session{}, errNoSession
	}
	id := b64.EncodeToString(body[:16])
	s.mu.Lock()
	_, gone := s.ended[id]
	s.mu.Unlock()
	if gone {
		return session{}, errNoSession
	}
	return session{ID: id, Expires: exp, CSRF: s.csrfOf(body[:16])}, nil
}

// end forgets a session on this replica until it would have expired.
func (s *sessions) end(sess session) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, exp := range s.ended {
		if !now.Before(exp) {
			delete(s.ended, id)
		}
	}
	s.ended[sess.ID] = sess.Expires
}

// validCSRF compares a form's token with the session's in constant time.
func validCSRF(sess session, token string) bool {
	return hmac.Equal([]byte(sess.CSRF), []byte(token))
}

// cookie is the session cookie: HttpOnly, SameSite=Strict, scoped to the
// console, Secure when the request came over TLS (or the edge is told it
// sits behind a TLS proxy).
func cookie(value string, exp time.Time, secure bool) *http.Cookie {
	c := &http.Cookie{Name: cookieName, Value: value, Path: "/console", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = exp
	}
	return c
}

// loginLimiter bounds failed logins: at most burst failures, refilled at
// one per interval, for the whole replica (the admin key is one secret, so
// a guesser gains nothing from spreading over addresses).
type loginLimiter struct {
	mu       sync.Mutex
	tokens   float64
	last     time.Time
	burst    float64
	interval time.Duration
	now      func() time.Time
}

func newLoginLimiter(burst int, interval time.Duration, now func() time.Time) *loginLimiter {
	return &loginLimiter{tokens: float64(burst), burst: float64(burst), interval: interval, now: now, last: now()}
}

func (l *loginLimiter) refill() {
	now := l.now()
	l.tokens = min(l.burst, l.tokens+float64(now.Sub(l.last))/float64(l.interval))
	l.last = now
}

// allowed reports whether a login may be tried now.
func (l *loginLimiter) allowed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill()
	return l.tokens >= 1
}

// failed spends one token.
func (l *loginLimiter) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill()
	l.tokens = max(0, l.tokens-1)
}
