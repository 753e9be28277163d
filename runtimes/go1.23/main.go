// sless runtime for go1.23 (runtime version v0.1.0).
//
// Wraps the user's handler package in a small HTTP server, or calls it once in
// job mode (SLESS_MODE=job). Stdlib only, and nothing newer than Go 1.19 so it
// also builds with Debian 12's golang-go. The contract is in runtimes/README.md.
//
// This file does not compile alone: build.sh puts it in <build>/_sless/ next to
// a generated handler_gen.go that binds the user's package:
//
//	var userHandle func(map[string]any) (any, error) = userhandler.Handle
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Exit codes shared by all runtimes (3, "cannot load handler", cannot happen
// here: a broken handler is a build error).
const (
	exitHandlerError = 1
	exitBadEvent     = 2
)

const (
	// Longer than any sane proxy pool idle timeout, so the server never closes
	// a pooled connection the proxy is about to reuse.
	idleTimeout   = 620 * time.Second
	shutdownGrace = 10 * time.Second
)

// Response headers computed by the runtime itself; a handler's values are ignored.
var managedHeaders = map[string]bool{"content-length": true, "transfer-encoding": true, "connection": true}

func main() {
	// Relative file access in the handler resolves against its directory.
	if dir := os.Getenv("SLESS_FUNCTION_DIR"); dir != "" {
		if err := os.Chdir(dir); err != nil {
			fmt.Fprintf(os.Stderr, "sless-runtime: warning: %v\n", err)
		}
	}
	if os.Getenv("SLESS_MODE") == "job" {
		os.Exit(runJob())
	}
	os.Exit(serve())
}

// callHandler turns a panic into an error so the server keeps serving.
func callHandler(event map[string]any) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "panic: %v\n%s", p, debug.Stack())
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	result, err = userHandle(event)
	if err != nil {
		fmt.Fprintf(os.Stderr, "handler error: %v\n", err)
	}
	return result, err
}

// encodeJSON is compact and does not escape <>& (same output style as python/node).
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func mustJSON(v any) []byte {
	data, err := encodeJSON(v)
	if err != nil {
		data, _ = encodeJSON(map[string]any{"error": err.Error()})
	}
	return data
}

// wrapEvent: the handler always gets an object.
func wrapEvent(v any) map[string]any {
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{"body": v}
}

// ------------------------------------------------------------------ responses

type response struct {
	status  int
	headers [][2]string
	body    []byte
}

func jsonResponse(status int, data []byte) response {
	return response{status, [][2]string{{"Content-Type", "application/json"}}, data}
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// headerValues decodes one header entry: a string, a list of them, or any
// other JSON value (sent as its JSON text).
func headerValues(name string, raw json.RawMessage) ([]string, error) {
	var list []json.RawMessage
	if len(raw) > 0 && raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
	} else {
		list = []json.RawMessage{raw}
	}
	var out []string
	for _, item := range list {
		text := string(item)
		if text == "null" {
			continue
		}
		if len(item) > 0 && item[0] == '"' {
			if err := json.Unmarshal(item, &text); err != nil {
				return nil, err
			}
		}
		if strings.ContainsAny(text, "\r\n\x00") {
			return nil, fmt.Errorf("invalid value for response header %q", name)
		}
		out = append(out, text)
	}
	return out, nil
}

// buildResponse works on the JSON form of the result, so maps and structs
// with `json:"statusCode"` tags are treated alike.
func buildResponse(result any) (response, error) {
	data, err := encodeJSON(result)
	if err != nil {
		return response{}, err
	}
	plain := jsonResponse(http.StatusOK, data)
	if len(data) == 0 || data[0] != '{' {
		return plain, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return plain, nil
	}
	var code float64
	if raw, ok := obj["statusCode"]; !ok || json.Unmarshal(raw, &code) != nil || code != math.Trunc(code) {
		return plain, nil
	}
	if code < 200 || code > 599 {
		return response{}, fmt.Errorf("invalid statusCode %v: must be 200-599", code)
	}
	resp := response{status: int(code)}

	if raw, ok := obj["headers"]; ok && string(raw) != "null" {
		var hdrs map[string]json.RawMessage
		if err := json.Unmarshal(raw, &hdrs); err != nil {
			return response{}, errors.New("headers must be an object")
		}
		names := make([]string, 0, len(hdrs))
		for name := range hdrs {
			names = append(names, name)
		}
		sort.Strings(names) // deterministic order
		for _, name := range names {
			if !validHeaderName(name) {
				return response{}, fmt.Errorf("invalid response header name %q", name)
			}
			if managedHeaders[strings.ToLower(name)] {
				continue
			}
			values, err := headerValues(name, hdrs[name])
			if err != nil {
				return response{}, err
			}
			for _, v := range values {
				resp.headers = append(resp.headers, [2]string{name, v})
			}
		}
	}
	hasType := false
	for _, h := range resp.headers {
		if strings.EqualFold(h[0], "Content-Type") {
			hasType = true
		}
	}

	defaultType := "application/json"
	rawBody, hasBody := obj["body"]
	if m, ok := result.(map[string]any); ok {
		// []byte would be base64 in JSON: send it raw instead.
		if b, ok := m["body"].([]byte); ok {
			resp.body, defaultType = b, "application/octet-stream"
			hasBody = false
		}
	}
	if hasBody && string(rawBody) != "null" {
		if rawBody[0] == '"' {
			var s string
			if err := json.Unmarshal(rawBody, &s); err != nil {
				return response{}, err
			}
			resp.body, defaultType = []byte(s), "text/plain; charset=utf-8"
		} else {
			resp.body = rawBody
		}
	}
	if len(resp.body) > 0 && !hasType {
		resp.headers = append(resp.headers, [2]string{"Content-Type", defaultType})
	}
	return resp, nil
}

func send(w http.ResponseWriter, r *http.Request, resp response) {
	h := w.Header()
	for _, kv := range resp.headers {
		h.Add(kv[0], kv[1])
	}
	noBody := resp.status == http.StatusNoContent || resp.status == http.StatusNotModified
	if !noBody {
		h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	}
	w.WriteHeader(resp.status)
	if !noBody && r.Method != http.MethodHead {
		_, _ = w.Write(resp.body)
	}
}

// ------------------------------------------------------------------ HTTP mode

// splitTarget keeps the path exactly as received (still percent-encoded).
func splitTarget(r *http.Request) (string, string) {
	if strings.HasPrefix(r.RequestURI, "/") {
		p, q, _ := strings.Cut(r.RequestURI, "?")
		p, _, _ = strings.Cut(p, "#")
		return p, q
	}
	return r.URL.EscapedPath(), r.URL.RawQuery // absolute-form request target
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// unescape is lenient like python's unquote_plus: bad escapes stay as they are.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '+':
			b.WriteByte(' ')
		case s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
		default:
			b.WriteByte(s[i])
		}
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

// parseQuery keeps the first value per key. Not url.ParseQuery: it drops
// pairs containing ';', which python and node keep.
func parseQuery(raw string) map[string]any {
	q := map[string]any{}
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		k = unescape(k)
		if _, seen := q[k]; !seen {
			q[k] = unescape(v)
		}
	}
	return q
}

func buildEvent(r *http.Request, body []byte, path, rawQuery string) map[string]any {
	var event map[string]any
	if len(bytes.TrimSpace(body)) == 0 {
		event = map[string]any{}
	} else {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			event = map[string]any{"body": strings.ToValidUTF8(string(body), "\uFFFD")}
		} else {
			event = wrapEvent(v)
		}
	}
	headers := map[string]any{}
	// net/http moves Host and Transfer-Encoding out of r.Header; put them back
	// so the event matches the other runtimes.
	headers["host"] = r.Host
	if len(r.TransferEncoding) > 0 {
		headers["transfer-encoding"] = strings.Join(r.TransferEncoding, ", ")
	}
	for name, values := range r.Header {
		headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	if path == "" {
		path = "/"
	}
	event["_http"] = map[string]any{
		"method":    r.Method,
		"path":      path,
		"query":     parseQuery(rawQuery),
		"raw_query": rawQuery,
		"headers":   headers,
	}
	if amqp := triggerProperties(r.Header.Get("X-Sless-Amqp")); amqp != nil {
		event["_amqp"] = amqp
	}
	if requestID := r.Header.Get("X-Request-Id"); requestID != "" {
		event["_request_id"] = requestID
	}
	return event
}

// triggerProperties decodes the message properties an event trigger sends (base64
// of JSON); nil when absent or malformed.
func triggerProperties(header string) map[string]any {
	if header == "" {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		return nil
	}
	var value map[string]any
	if json.Unmarshal(raw, &value) != nil {
		return nil
	}
	return value
}

func handleRequest(w http.ResponseWriter, r *http.Request) {
	path, rawQuery := splitTarget(r)
	if path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		send(w, r, jsonResponse(http.StatusOK, []byte(`{"status":"ok"}`)))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // client went away
	}
	call := beginCall(r.Header.Get("X-Request-Id"))
	defer endCall(call)
	result, err := callHandler(buildEvent(r, body, path, rawQuery))
	var resp response
	if err == nil {
		resp, err = buildResponse(result)
	}
	if err != nil {
		resp = jsonResponse(http.StatusInternalServerError, mustJSON(map[string]any{"error": err.Error()}))
	}
	send(w, r, resp)
}

// announceReady tells the runner the server listens (a byte on SLESS_READY_FD),
// so it need not poll.
func announceReady() {
	fd, err := strconv.Atoi(os.Getenv("SLESS_READY_FD"))
	os.Unsetenv("SLESS_READY_FD")
	if err != nil || fd < 0 {
		return
	}
	f := os.NewFile(uintptr(fd), "ready")
	_, _ = f.Write([]byte("1"))
	_ = f.Close() // the handler's own child processes must not hold it
}

// listen takes the listening socket sless made for this instance (SLESS_LISTEN_FD),
// else listens on addr.
func listen(addr string) (net.Listener, error) {
	fd, err := strconv.Atoi(os.Getenv("SLESS_LISTEN_FD"))
	os.Unsetenv("SLESS_LISTEN_FD")
	if err != nil || fd < 0 {
		return net.Listen("tcp", addr)
	}
	f := os.NewFile(uintptr(fd), "listener")
	// FileListener works on a close-on-exec duplicate: the handler's own child
	// processes do not inherit the listener.
	ln, err := net.FileListener(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("no listening socket on descriptor %d: %w", fd, err)
	}
	return ln, nil
}

func serve() int {
	host := os.Getenv("SLESS_HOST")
	if host == "" {
		host = "0.0.0.0"
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	// AllowQuerySemicolons only silences net/http's per-request warning about
	// ';' in queries: the event is built from the raw RequestURI anyway.
	srv := &http.Server{
		Addr:              net.JoinHostPort(host, port),
		Handler:           http.AllowQuerySemicolons(http.HandlerFunc(handleRequest)),
		ReadHeaderTimeout: 60 * time.Second,
		IdleTimeout:       idleTimeout,
	}
	// On SIGTERM stop accepting, let in-flight requests finish briefly, exit.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := listen(srv.Addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sless-runtime: %v\n", err)
		return 1
	}
	stopTagging := tagCallLogs()
	defer stopTagging()
	announceReady()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(os.Stderr, "sless-runtime: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return 0
}

// ------------------------------------------------------------------ call logs
//
// Each line a handler prints goes out as "[<request id>] line" when one call ran as it
// began, else as "[-] line", the tags the Python and Node runtimes write. Go has no
// per-call context a print could be told apart by: os.Stdout and os.Stderr become
// pipes read here, and each call writes a marker into both as it begins and ends, so
// the readers see, in the order of the writes, which calls ran. A line printed while
// several calls run at once is tied to none; one printed by a goroutine a call left
// behind, to the call then running alone, if any.

// maxPendingLine: a line longer than this goes out cut (sless keeps 16 KiB of a line).
const maxPendingLine = 16384

const outsideCall = "[-] "

var callLogs struct {
	// Starts every marker: a NUL and random bytes no handler prints by chance.
	marker []byte
	// The pipes' write ends; none until tagCallLogs.
	pipes []*os.File
	calls uint64

	// The calls running, for the log package's lines, written at once.
	mu      sync.Mutex
	running map[uint64]string
}

// beginCall marks the start of a call in the logs; its number ends it.
func beginCall(requestID string) uint64 {
	n := atomic.AddUint64(&callLogs.calls, 1)
	tag := callTag(requestID)
	callLogs.mu.Lock()
	callLogs.running[n] = tag
	callLogs.mu.Unlock()
	writeMarker(fmt.Sprintf("b %d %s", n, tag))
	return n
}

func endCall(n uint64) {
	writeMarker(fmt.Sprintf("e %d", n))
	callLogs.mu.Lock()
	delete(callLogs.running, n)
	callLogs.mu.Unlock()
}

// writeMarker writes one marker line into each pipe: short, so one atomic write.
func writeMarker(text string) {
	line := append(append(append([]byte{}, callLogs.marker...), text...), '\n')
	for _, pipe := range callLogs.pipes {
		_, _ = pipe.Write(line)
	}
}

func callTag(requestID string) string {
	if requestID == "" || len(requestID) > 64 {
		return outsideCall
	}
	for _, c := range requestID {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return outsideCall
		}
	}
	return "[" + requestID + "] "
}

// tagCallLogs routes os.Stdout, os.Stderr and the log package through the tagging;
// the returned func sends out what is held and puts the streams back.
func tagCallLogs() func() {
	var token [12]byte
	if _, err := rand.Read(token[:]); err != nil {
		return func() {}
	}
	stdout, stderr := os.Stdout, os.Stderr
	outR, outW, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_, _ = outR.Close(), outW.Close()
		return func() {}
	}
	callLogs.marker = []byte("\x00sless-" + hex.EncodeToString(token[:]) + " ")
	callLogs.running = map[uint64]string{}
	callLogs.pipes = []*os.File{outW, errW}
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go relayTagged(outR, stdout, outDone)
	go relayTagged(errR, stderr, errDone)
	os.Stdout, os.Stderr = outW, errW
	// Written at once, not through a pipe: log.Fatal exits right after.
	log.SetOutput(logWriter{stderr})
	return func() {
		os.Stdout, os.Stderr = stdout, stderr
		log.SetOutput(stderr)
		_, _ = outW.Close(), errW.Close()
		for _, done := range []chan struct{}{outDone, errDone} {
			select {
			case <-done:
			case <-time.After(2 * time.Second): // a child process may hold a pipe open
			}
		}
	}
}

// logWriter tags the log package's lines with the call running alone, if any.
type logWriter struct{ out *os.File }

func (w logWriter) Write(p []byte) (int, error) {
	tag := outsideCall
	callLogs.mu.Lock()
	if len(callLogs.running) == 1 {
		for _, running := range callLogs.running {
			tag = running
		}
	}
	callLogs.mu.Unlock()
	var out []byte
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(p), "\n"), "\n") {
		out = append(append(out, tag...), line...)
	}
	_, err := w.out.Write(append(out, '\n'))
	return len(p), err
}

// relayTagged copies what the handler printed from r to out, each line behind its
// call's tag, following the markers; done is closed at r's end.
func relayTagged(r io.Reader, out io.Writer, done chan struct{}) {
	defer close(done)
	marker := callLogs.marker
	t := tagger{running: map[string]string{}}
	buf := make([]byte, 32*1024)
	var held []byte
	for {
		n, err := r.Read(buf)
		held = append(held, buf[:n]...)
		for len(held) > 0 {
			at := bytes.Index(held, marker)
			if at < 0 {
				// The start of a marker may end what was read: kept for the next read.
				keep := 0
				if i := bytes.LastIndexByte(held, 0); i >= 0 && err == nil && bytes.HasPrefix(marker, held[i:]) {
					keep = len(held) - i
				}
				t.text(held[:len(held)-keep])
				held = held[len(held)-keep:]
				break
			}
			t.text(held[:at])
			end := bytes.IndexByte(held[at:], '\n')
			if end < 0 {
				held = held[at:]
				break
			}
			t.mark(string(held[at+len(marker) : at+end]))
			held = held[at+end+1:]
		}
		if err != nil {
			t.endLine()
		}
		if len(t.out) > 0 {
			_, _ = out.Write(t.out)
			t.out = t.out[:0]
		}
		if err != nil {
			return
		}
	}
}

// tagger follows the calls running and the line being printed.
type tagger struct {
	running map[string]string // call number -> its tag
	line    []byte
	tag     string // the tag of the line begun; "" before its first byte
	owner   string // the call it is tied to; "" for none
	cut     bool   // it went out cut: its rest is dropped
	out     []byte // tagged lines to write
}

func (t *tagger) text(p []byte) {
	for len(p) > 0 {
		chunk := p
		nl := bytes.IndexByte(p, '\n')
		if nl >= 0 {
			chunk = p[:nl]
		}
		if t.tag == "" {
			t.tag, t.owner = outsideCall, ""
			if len(t.running) == 1 {
				for call, tag := range t.running {
					t.tag, t.owner = tag, call
				}
			}
		}
		if !t.cut {
			if room := maxPendingLine - len(t.line); len(chunk) > room {
				t.line = append(t.line, chunk[:room]...)
				t.write()
				t.cut = true
			} else {
				t.line = append(t.line, chunk...)
			}
		}
		if nl < 0 {
			return
		}
		t.endLine()
		p = p[nl+1:]
	}
}

// endLine writes the line begun, if any and not cut, and starts the next.
func (t *tagger) endLine() {
	if t.tag != "" && !t.cut {
		t.write()
	}
	t.tag, t.owner, t.cut = "", "", false
}

func (t *tagger) write() {
	t.out = append(append(append(t.out, t.tag...), t.line...), '\n')
	t.line = t.line[:0]
}

// mark applies a marker: "b <call> <tag>" or "e <call>". A line its call left unended
// goes out as the call ends.
func (t *tagger) mark(text string) {
	fields := strings.SplitN(text, " ", 3)
	switch {
	case len(fields) == 3 && fields[0] == "b":
		t.running[fields[1]] = fields[2]
	case len(fields) == 2 && fields[0] == "e":
		delete(t.running, fields[1])
		if t.owner == fields[1] {
			t.endLine()
		}
	}
}

// ------------------------------------------------------------------- job mode

// stdoutTracker routes os.Stdout through a pipe to remember whether the
// handler's output ended a line, so the result gets a line of its own.
type stdoutTracker struct {
	real *os.File
	w    *os.File
	mu   sync.Mutex
	last byte
	done chan struct{}
}

func trackStdout() *stdoutTracker {
	t := &stdoutTracker{real: os.Stdout, last: '\n', done: make(chan struct{})}
	r, w, err := os.Pipe()
	if err != nil {
		close(t.done)
		return t
	}
	t.w = w
	os.Stdout = w
	go func() {
		defer close(t.done)
		buf := make([]byte, 32*1024)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = t.real.Write(buf[:n])
				t.mu.Lock()
				t.last = buf[n-1]
				t.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return t
}

func (t *stdoutTracker) finish(v any, code int) int {
	os.Stdout = t.real
	if t.w != nil {
		_ = t.w.Close()
		// A child process may still hold the pipe open: do not wait forever.
		select {
		case <-t.done:
		case <-time.After(2 * time.Second):
		}
	}
	t.mu.Lock()
	last := t.last
	t.mu.Unlock()
	line := mustJSON(v)
	if last != '\n' {
		_, _ = t.real.Write([]byte("\n"))
	}
	_, _ = t.real.Write(append(line, '\n'))
	return code
}

func runJob() int {
	t := trackStdout()
	raw := os.Getenv("SLESS_EVENT_JSON")
	event := map[string]any{}
	if strings.TrimSpace(raw) != "" {
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			msg := "invalid SLESS_EVENT_JSON: " + err.Error()
			fmt.Fprintln(os.Stderr, "sless-runtime: "+msg)
			return t.finish(map[string]any{"error": msg}, exitBadEvent)
		}
		event = wrapEvent(v)
	}
	result, err := callHandler(event)
	if err == nil {
		_, err = encodeJSON(result) // not encodable counts as a handler error
	}
	if err != nil {
		return t.finish(map[string]any{"error": err.Error()}, exitHandlerError)
	}
	return t.finish(result, 0)
}
