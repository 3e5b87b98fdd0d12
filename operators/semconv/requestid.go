package semconv

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp/wire"
)

// RequestIDRules says where request ids are found in logs and spans. The
// zero value finds nothing; start from DefaultRequestIDRules.
//
// Normal form: an id is the attribute value (ints in decimal) or the text
// of the pattern's capture group, verbatim, except that a rule may give a
// prefix: an attribute key written "key=prefix" and a capture group named
// NAME ((?P<NAME>…)) put prefix, respectively "NAME-", before the id unless
// it already starts with it. The defaults use this for llama.cpp, whose
// "task 42" becomes "task-42" in logs and spans alike.
type RequestIDRules struct {
	// AttributeKeys are the attribute keys holding a request id, by
	// priority: "key" or "key=prefix". Default: see DefaultRequestIDRules.
	AttributeKeys []string `yaml:"attribute_keys"`
	// BodyPatterns are regular expressions (Go RE2 syntax) with exactly
	// one capture group, tried in order on a log body that is a string,
	// when no attribute gave an id. The first match wins. The group must
	// take part in every match and cannot match the empty string, so a
	// match always gives an id. Default: see DefaultRequestIDRules.
	BodyPatterns []string `yaml:"body_patterns"`
	// IDFormats are regular expressions a well-formed request id matches
	// in full (they are anchored). An id that matches none has an unknown
	// format (see Anchor validity). Empty: every non-empty id is known.
	// Default: see DefaultRequestIDRules.
	IDFormats []string `yaml:"id_formats"`
}

// DefaultRequestIDRules returns the rules for vLLM, SGLang, llama.cpp and
// Triton (TensorRT-LLM):
//
//   - attributes gen_ai.request.id (vLLM, TensorRT-LLM, braid's simulator),
//     rid (SGLang), request_id and triton.request_id (Triton), id_task and
//     task_id (llama.cpp, as "task-N");
//   - bodies: vLLM "cmpl-…" and "chatcmpl-…" ("Added request
//     chatcmpl-9f…", "Finished request cmpl-3c…-0"); SGLang "rid=…" and
//     "rid='…'" ("Receive: obj=GenerateReqInput(rid='3f2a…', …)"); llama.cpp
//     "task 42" and JSON "id_task":42 → "task-42"; Triton "[request id: 7]"
//     (not "<id_unknown>") and request_id=… / request_id: ….
//   - formats: (chat)cmpl-…, task-N, 8–64 hex digits, a UUID, a decimal
//     number.
func DefaultRequestIDRules() RequestIDRules {
	return RequestIDRules{
		AttributeKeys: []string{
			"gen_ai.request.id",
			"rid",
			"request_id",
			"triton.request_id",
			"id_task=task-",
			"task_id=task-",
		},
		BodyPatterns: []string{
			`\b(chatcmpl-[A-Za-z0-9_-]+)`,
			`\b(cmpl-[A-Za-z0-9_-]+)`,
			`\brid=['"]?([A-Za-z0-9_.:-]+)`,
			`\btask (?P<task>\d+)\b`,
			`"id_task":\s*(?P<task>\d+)`,
			`\[request id: ([^\]<>\s][^\]]*)\]`,
			`\brequest_id[=:]\s*['"]?([A-Za-z0-9_.:-]+)`,
		},
		IDFormats: []string{
			`(?:chat)?cmpl-[A-Za-z0-9_-]+`,
			`task-\d+`,
			`[0-9a-fA-F]{8,64}`,
			`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`,
			`\d{1,20}`,
		},
	}
}

// Validate reports every problem of the rules at once.
func (r RequestIDRules) Validate() error {
	_, err := r.compile()
	return err
}

// Compile validates the rules and compiles them.
func (r RequestIDRules) Compile() (*RequestIDs, error) {
	return r.compile()
}

// RequestIDs extracts request ids from serialized OTLP spans and log
// records. It is safe for concurrent use.
type RequestIDs struct {
	attrs    []attrRule // by priority
	attrLens uint64     // bit min(len(key), 63) of each attrs key
	bodies   []bodyRule
	formats  []idFormat
}

// idFormat is a compiled IDFormats entry with bounds that reject most
// ids of other formats before the regexp runs.
type idFormat struct {
	re             *regexp.Regexp // anchored
	first          byteSet        // the bytes a match can start with
	minLen, maxLen int            // maxLen -1: unbounded
	pieces         []piece        // the pattern as pieces, when it can be; nil: use re
}

func (f *idFormat) match(id []byte) bool {
	if !admits(f, id) {
		return false
	}
	if f.pieces != nil {
		return matchPieces(f.pieces, id)
	}
	return f.re.Match(id)
}

func (f *idFormat) matchString(id string) bool {
	if !admits(f, id) {
		return false
	}
	if f.pieces != nil {
		return matchPieces(f.pieces, id)
	}
	return f.re.MatchString(id)
}

// piece is one element of a pattern made of ASCII literals, optional
// ASCII literals and repeated ASCII character classes — the shape of
// the usual id formats — matched without the regexp machinery.
type piece struct {
	lit      string  // a literal; "" for a class
	class    byteSet // for a class: the bytes it matches
	min, max int     // repetitions; a literal: 1, 1, or 0, 1 when optional; max -1: unbounded
}

// Bounds on the backtracking of matchPieces: pieces with a repetition
// count that is not fixed, classes and optional literals.
const (
	maxClassChoices   = 1
	maxLiteralChoices = 2
)

// patternPieces splits a parsed pattern into pieces, or returns nil when
// it has another shape or too many choices to match cheaply.
func patternPieces(re *syntax.Regexp) []piece {
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	var ps []piece
	classChoices, litChoices := 0, 0
	for _, sub := range subs {
		p, ok := toPiece(sub)
		switch {
		case !ok:
			return nil
		case p.min == p.max:
		case p.lit != "":
			litChoices++
		default:
			classChoices++
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 || classChoices > maxClassChoices || litChoices > maxLiteralChoices {
		return nil
	}
	return ps
}

func toPiece(re *syntax.Regexp) (piece, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 || len(re.Rune) == 0 {
			return piece{}, false
		}
		b := make([]byte, 0, len(re.Rune))
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf {
				return piece{}, false
			}
			b = append(b, byte(r))
		}
		return piece{lit: string(b), min: 1, max: 1}, true
	case syntax.OpCharClass:
		var p piece
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i+1] >= utf8.RuneSelf {
				return piece{}, false
			}
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				p.class.add(byte(r))
			}
		}
		p.min, p.max = 1, 1
		return p, true
	case syntax.OpQuest, syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		p, ok := toPiece(re.Sub[0])
		if !ok || p.min != 1 || p.max != 1 {
			return piece{}, false
		}
		switch re.Op {
		case syntax.OpQuest:
			p.min, p.max = 0, 1
		case syntax.OpStar:
			p.min, p.max = 0, -1
		case syntax.OpPlus:
			p.min, p.max = 1, -1
		default:
			p.min, p.max = re.Min, re.Max
		}
		if p.lit != "" && p.max != 1 {
			return piece{}, false // a repeated literal
		}
		return p, true
	}
	return piece{}, false
}

// matchPieces reports whether ps match all of s.
func matchPieces[S string | []byte](ps []piece, s S) bool {
	if len(ps) == 0 {
		return len(s) == 0
	}
	p := &ps[0]
	if p.lit != "" {
		if len(s) >= len(p.lit) && string(s[:len(p.lit)]) == p.lit && matchPieces(ps[1:], s[len(p.lit):]) {
			return true
		}
		return p.min == 0 && matchPieces(ps[1:], s)
	}
	// Greedy, then fewer.
	n := 0
	for n < len(s) && (p.max < 0 || n < p.max) && p.class.has(s[n]) {
		n++
	}
	for ; n >= p.min; n-- {
		if matchPieces(ps[1:], s[n:]) {
			return true
		}
	}
	return false
}

// admits reports whether id passes f's bounds; a match passes them.
func admits[S string | []byte](f *idFormat, id S) bool {
	return len(id) >= f.minLen && (f.maxLen < 0 || len(id) <= f.maxLen) && (len(id) == 0 || f.first.has(id[0]))
}

type attrRule struct {
	key    string
	prefix string
}

type bodyRule struct {
	re      *regexp.Regexp
	literal []byte // a substring every match contains; may be empty
	before  int    // most bytes a match spans before literal; -1: unbounded
	prefix  string
	// The pattern as pieces starting with a literal, optionally after
	// \b, for telling whether it matches without the regexp; nil: use re.
	pieces    []piece
	wordStart bool // the pattern starts with \b
}

// bodyPieces splits a body pattern of the shape [\b] literal piece… —
// capture groups aside — into pieces, or returns nil.
func bodyPieces(pattern string) (ps []piece, wordStart bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil || re.Op != syntax.OpConcat {
		return nil, false
	}
	var flat []*syntax.Regexp
	var add func(re *syntax.Regexp)
	add = func(re *syntax.Regexp) {
		switch {
		case re.Op == syntax.OpCapture:
			add(re.Sub[0])
		case re.Op == syntax.OpConcat:
			for _, sub := range re.Sub {
				add(sub)
			}
		default:
			flat = append(flat, re)
		}
	}
	add(re)
	if len(flat) > 0 && flat[0].Op == syntax.OpWordBoundary {
		wordStart, flat = true, flat[1:]
	}
	choices := 0
	for _, sub := range flat {
		p, ok := toPiece(sub)
		if !ok {
			return nil, false
		}
		if p.min != p.max {
			choices++
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 || ps[0].lit == "" || ps[0].min != 1 || choices > maxBodyChoices {
		return nil, false
	}
	return ps, wordStart
}

// maxBodyChoices bounds the backtracking of a body pattern's pieces.
const maxBodyChoices = 4

// maxPieceText is the longest text given to the pieces of a body pattern;
// longer texts go to the regexp, whose time is linear.
const maxPieceText = 4096

// matches reports whether r matches text, which holds r's literal from
// off on (see window).
func (r *bodyRule) matches(text []byte, off int) bool {
	if r.pieces == nil || len(text) > maxPieceText {
		return r.re.Match(text[off:])
	}
	lit := r.pieces[0].lit
	for i := off; ; {
		j := bytes.Index(text[i:], []byte(lit))
		if j < 0 {
			return false
		}
		i += j
		if (!r.wordStart || (i > 0 && isWordByte(text[i-1])) != isWordByte(lit[0])) &&
			matchPrefix(r.pieces[1:], text[i+len(lit):]) {
			return true
		}
		i++
	}
}

// isWordByte reports whether b is an ASCII word character (RE2's \w);
// a byte of a multi-byte rune is not.
func isWordByte(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// matchPrefix reports whether ps match a prefix of s.
func matchPrefix(ps []piece, s []byte) bool {
	if len(ps) == 0 {
		return true
	}
	p := &ps[0]
	if p.lit != "" {
		if len(s) >= len(p.lit) && string(s[:len(p.lit)]) == p.lit && matchPrefix(ps[1:], s[len(p.lit):]) {
			return true
		}
		return p.min == 0 && matchPrefix(ps[1:], s)
	}
	n := 0
	for n < len(s) && (p.max < 0 || n < p.max) && p.class.has(s[n]) {
		n++
	}
	for ; n >= p.min; n-- {
		if matchPrefix(ps[1:], s[n:]) {
			return true
		}
	}
	return false
}

func (r RequestIDRules) compile() (*RequestIDs, error) {
	var errs []error
	ids := &RequestIDs{}
	for i, k := range r.AttributeKeys {
		key, prefix, _ := strings.Cut(k, "=")
		switch {
		case key == "":
			errs = append(errs, fmt.Errorf("semconv: attribute_keys[%d] %q: empty key", i, k))
		case ids.attrRule([]byte(key)) >= 0:
			errs = append(errs, fmt.Errorf("semconv: attribute_keys[%d] %q: duplicate key", i, k))
		default:
			ids.attrs = append(ids.attrs, attrRule{key: key, prefix: prefix})
			ids.attrLens |= 1 << min(len(key), 63)
		}
	}
	for i, p := range r.BodyPatterns {
		re, err := regexp.Compile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("semconv: body_patterns[%d] %q: %w", i, p, err))
			continue
		}
		if n := re.NumSubexp(); n != 1 {
			errs = append(errs, fmt.Errorf("semconv: body_patterns[%d] %q: %d capture groups, want 1", i, p, n))
			continue
		}
		if err := checkCapture(p); err != nil {
			errs = append(errs, fmt.Errorf("semconv: body_patterns[%d] %q: %w", i, p, err))
			continue
		}
		lit, before := requiredLiteral(p)
		rule := bodyRule{re: re, literal: []byte(lit), before: before}
		rule.pieces, rule.wordStart = bodyPieces(p)
		if name := re.SubexpNames()[1]; name != "" {
			rule.prefix = name + "-"
		}
		ids.bodies = append(ids.bodies, rule)
	}
	for i, f := range r.IDFormats {
		re, err := regexp.Compile(`^(?:` + f + `)$`)
		if err != nil {
			errs = append(errs, fmt.Errorf("semconv: id_formats[%d] %q: %w", i, f, err))
			continue
		}
		ids.formats = append(ids.formats, compileFormat(re, f))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ids, nil
}

// requiredLiteral returns the longest case-sensitive literal that every
// match of the pattern contains, and the most bytes a match can span
// before it (-1: unbounded). The literal is "" when there is none.
func requiredLiteral(pattern string) (lit string, before int) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", -1
	}
	before = -1
	var walk func(re *syntax.Regexp, pre int)
	walk = func(re *syntax.Regexp, pre int) {
		switch re.Op {
		case syntax.OpLiteral:
			if s := string(re.Rune); re.Flags&syntax.FoldCase == 0 && len(s) > len(lit) {
				lit, before = s, pre
			}
		case syntax.OpConcat:
			for _, sub := range re.Sub {
				walk(sub, pre)
				pre = addWidth(pre, maxWidth(sub))
			}
		case syntax.OpCapture, syntax.OpPlus:
			walk(re.Sub[0], pre)
		case syntax.OpRepeat:
			if re.Min >= 1 {
				walk(re.Sub[0], pre)
			}
		}
	}
	walk(re, 0)
	return lit, before
}

// checkCapture requires the pattern's capture group to take part in every
// match and to match at least one character, so that a match always
// yields an id.
func checkCapture(pattern string) error {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return err
	}
	var capture *syntax.Regexp
	var find func(re *syntax.Regexp)
	find = func(re *syntax.Regexp) {
		switch re.Op {
		case syntax.OpCapture:
			capture = re
		case syntax.OpConcat:
			for _, sub := range re.Sub {
				find(sub)
			}
		case syntax.OpPlus:
			find(re.Sub[0])
		case syntax.OpRepeat:
			if re.Min >= 1 {
				find(re.Sub[0])
			}
		}
	}
	find(re)
	if capture == nil {
		return errors.New("the capture group must take part in every match (not under ?, *, | or {0,n})")
	}
	empty, err := regexp.Compile(`^(?:` + capture.Sub[0].String() + `)$`)
	if err != nil {
		return err
	}
	if empty.MatchString("") {
		return errors.New("the capture group can match the empty string")
	}
	return nil
}

func addWidth(a, b int) int {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

// maxWidth returns the most bytes a match of re can span, -1 if unbounded.
func maxWidth(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0
	case syntax.OpLiteral:
		return len(re.Rune) * utf8.UTFMax
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return utf8.UTFMax
	case syntax.OpCapture, syntax.OpQuest:
		return maxWidth(re.Sub[0])
	case syntax.OpConcat:
		w := 0
		for _, sub := range re.Sub {
			w = addWidth(w, maxWidth(sub))
		}
		return w
	case syntax.OpAlternate:
		w := 0
		for _, sub := range re.Sub {
			sw := maxWidth(sub)
			if sw < 0 {
				return -1
			}
			w = max(w, sw)
		}
		return w
	case syntax.OpRepeat:
		if re.Max < 0 {
			return -1
		}
		sw := maxWidth(re.Sub[0])
		if sw < 0 {
			return -1
		}
		return re.Max * sw
	}
	return -1
}

// compileFormat adds to re, the anchored form of the id format f, the
// bytes a match can start with and its length bounds.
func compileFormat(re *regexp.Regexp, f string) idFormat {
	out := idFormat{re: re, maxLen: -1}
	sre, err := syntax.Parse(f, syntax.Perl)
	if err != nil {
		out.first.addAll()
		return out
	}
	out.first, _ = firstBytes(sre)
	out.minLen, out.maxLen = minWidth(sre), maxWidth(sre)
	out.pieces = patternPieces(sre)
	return out
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

func (s *byteSet) add(b byte) { s[b>>6] |= 1 << (b & 63) }

func (s *byteSet) addAll() { *s = byteSet{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)} }

func (s *byteSet) union(t byteSet) {
	for i := range s {
		s[i] |= t[i]
	}
}

// addRunes adds the first bytes of the UTF-8 encodings of lo…hi: the ASCII
// ones, and every byte ≥ 0x80 when the range goes beyond ASCII.
func (s *byteSet) addRunes(lo, hi rune) {
	for r := max(lo, 0); r <= min(hi, utf8.RuneSelf-1); r++ {
		s.add(byte(r))
	}
	if hi >= utf8.RuneSelf {
		s[2], s[3] = ^uint64(0), ^uint64(0)
	}
}

// firstBytes returns the bytes a match of re can start with, and whether
// re can match the empty string.
func firstBytes(re *syntax.Regexp) (first byteSet, nullable bool) {
	switch re.Op {
	case syntax.OpNoMatch:
		return first, false
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return first, true
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return first, true
		}
		r := re.Rune[0]
		first.addRunes(r, r)
		if re.Flags&syntax.FoldCase != 0 {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				first.addRunes(f, f)
			}
		}
		return first, false
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			first.addRunes(re.Rune[i], re.Rune[i+1])
		}
		return first, false
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		first.addAll()
		return first, false
	case syntax.OpCapture, syntax.OpPlus:
		return firstBytes(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest:
		first, _ = firstBytes(re.Sub[0])
		return first, true
	case syntax.OpRepeat:
		if re.Max == 0 {
			return first, true
		}
		first, nullable = firstBytes(re.Sub[0])
		return first, nullable || re.Min == 0
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			f, n := firstBytes(sub)
			first.union(f)
			if !n {
				return first, false
			}
		}
		return first, true
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			f, n := firstBytes(sub)
			first.union(f)
			nullable = nullable || n
		}
		return first, nullable
	}
	first.addAll()
	return first, true
}

// minWidth returns the fewest bytes a match of re can span.
func minWidth(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune) // a rune takes at least one byte
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture, syntax.OpPlus:
		return minWidth(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minWidth(re.Sub[0])
	case syntax.OpConcat:
		w := 0
		for _, sub := range re.Sub {
			w += minWidth(sub)
		}
		return w
	case syntax.OpAlternate:
		w := -1
		for _, sub := range re.Sub {
			if sw := minWidth(sub); w < 0 || sw < w {
				w = sw
			}
		}
		return max(w, 0)
	}
	return 0
}

var defaultIDs = func() *RequestIDs {
	ids, err := DefaultRequestIDRules().Compile()
	if err != nil {
		panic(err)
	}
	return ids
}()

// DefaultRequestIDs returns the compiled DefaultRequestIDRules.
func DefaultRequestIDs() *RequestIDs { return defaultIDs }

// KnownFormat reports whether id is non-empty and matches one of the
// rules' IDFormats (any non-empty id when there are none).
func (ids *RequestIDs) KnownFormat(id string) bool {
	if id == "" {
		return false
	}
	if len(ids.formats) == 0 {
		return true
	}
	for i := range ids.formats {
		if ids.formats[i].matchString(id) {
			return true
		}
	}
	return false
}

// knownFormatBytes is KnownFormat without the string.
func (ids *RequestIDs) knownFormatBytes(id []byte) bool {
	if len(id) == 0 {
		return false
	}
	if len(ids.formats) == 0 {
		return true
	}
	for i := range ids.formats {
		if ids.formats[i].match(id) {
			return true
		}
	}
	return false
}

// attrRule returns the index (priority) of the attribute rule for key, -1
// if none.
func (ids *RequestIDs) attrRule(key []byte) int {
	if ids.attrLens&(1<<min(len(key), 63)) == 0 {
		return -1
	}
	for i := range ids.attrs {
		if string(key) == ids.attrs[i].key {
			return i
		}
	}
	return -1
}

// idValueOK reports whether an attribute value can hold a request id: a
// scalar other than a bool, not an empty string.
func idValueOK(v Value) bool {
	return v.IsScalar() && v.Type != ValueBool && (v.Type != ValueString || len(v.Bytes) > 0)
}

// idAttr accumulates the highest-priority attribute holding a request id
// over the attributes of one message, in wire order.
type idAttr struct {
	prio int // -1: none yet
	val  Value
}

// offer considers the attribute key with the serialized AnyValue raw.
func (a *idAttr) offer(ids *RequestIDs, key, raw []byte) {
	if a.prio == 0 {
		return
	}
	p := ids.attrRule(key)
	if p < 0 || (a.prio >= 0 && p >= a.prio) {
		return
	}
	if v := wire.AnyValue(raw); idValueOK(v) {
		a.prio, a.val = p, v
	}
}

// appendID appends the normal form of the id in a (a.prio ≥ 0) to dst.
func (a *idAttr) appendID(ids *RequestIDs, dst []byte) []byte {
	prefix := ids.attrs[a.prio].prefix
	start := len(dst)
	dst = a.val.AppendText(dst)
	if prefix == "" || bytes.HasPrefix(dst[start:], []byte(prefix)) {
		return dst
	}
	n := len(dst) - start
	dst = append(dst, prefix...)
	copy(dst[start+len(prefix):], dst[start:start+n])
	copy(dst[start:], prefix)
	return dst
}

// id returns the normal form of the id in a (a.prio ≥ 0).
func (a *idAttr) id(ids *RequestIDs) string {
	if a.val.Type == ValueString && ids.attrs[a.prio].prefix == "" {
		return string(a.val.Bytes)
	}
	return withPrefix(ids.attrs[a.prio].prefix, a.val.String())
}

// scanLog reads, in one pass, the id attribute and the body of a
// serialized LogRecord.
func (ids *RequestIDs) scanLog(rec []byte) (a idAttr, body Value) {
	a.prio = -1
	var bodyRaw []byte
	hasBody := false
	for len(rec) > 0 {
		num, typ, raw, _, rest := wire.Next(rec)
		if rest == nil {
			break
		}
		rec = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case LogRecordAttrs:
			if len(ids.attrs) > 0 {
				k, v, _ := wire.KeyValue(raw)
				if a.offer(ids, k, v); a.prio == 0 {
					return a, Value{} // the body is not needed
				}
			}
		case 5:
			bodyRaw, hasBody = raw, true
		}
	}
	if hasBody {
		body = wire.AnyValue(bodyRaw)
	}
	return a, body
}

// hasLogID reports whether FromLog would find an id, without allocating.
func (ids *RequestIDs) hasLogID(logRecord []byte) bool {
	a, body := ids.scanLog(logRecord)
	if a.prio >= 0 {
		return true
	}
	return body.Type == ValueString && ids.bodyMatches(body.Bytes)
}

// bodyMatches reports whether a body pattern matches text.
func (ids *RequestIDs) bodyMatches(text []byte) bool {
	for i := range ids.bodies {
		r := &ids.bodies[i]
		off, ok := r.window(text)
		if ok && r.matches(text, off) {
			return true // the capture is required and non-empty (compile)
		}
	}
	return false
}

// window returns where in text a search for r needs to start: no match
// starts before the first occurrence of the literal minus before. One
// byte of left context is kept for \b and multi-line ^. ok is false when
// text lacks the literal, so that r cannot match.
func (r *bodyRule) window(text []byte) (off int, ok bool) {
	if len(r.literal) == 0 {
		return 0, true
	}
	i := bytes.Index(text, r.literal)
	if i < 0 {
		return 0, false
	}
	if r.before >= 0 {
		off = max(0, i-r.before-1)
	}
	return off, true
}

func withPrefix(prefix, id string) string {
	if prefix == "" || strings.HasPrefix(id, prefix) {
		return id
	}
	return prefix + id
}

// FromText returns the request id that the body patterns find in text.
// It does not allocate when there is none.
func (ids *RequestIDs) FromText(text []byte) (string, bool) {
	var loc [4]int
	for i := range ids.bodies {
		r := &ids.bodies[i]
		off, ok := r.window(text)
		if !ok {
			continue
		}
		m := r.re.FindSubmatchIndex(text[off:])
		if off > 0 && m != nil && m[0] == 0 {
			// Matched at the cut, where ^ and \b lack context: impossible
			// in the whole text unless by them; search the whole text.
			off = 0
			m = r.re.FindSubmatchIndex(text)
		}
		if m == nil || m[2] < 0 || m[3] <= m[2] {
			continue
		}
		copy(loc[:], m)
		return withPrefix(r.prefix, string(text[off+loc[2]:off+loc[3]])), true
	}
	return "", false
}

// FromLog returns the request id of a serialized LogRecord: from its
// attributes (by the priority of AttributeKeys), else from its body when
// the body is a string (LogRecord field 5, AnyValue field 1). It does not
// allocate when there is none.
func (ids *RequestIDs) FromLog(logRecord []byte) (string, bool) {
	a, body := ids.scanLog(logRecord)
	if a.prio >= 0 {
		return a.id(ids), true
	}
	if body.Type != ValueString {
		return "", false
	}
	return ids.FromText(body.Bytes)
}

// LogBody returns the body (field 5) of a serialized LogRecord; the empty
// Value when it has none.
func LogBody(rec []byte) Value {
	var body Value
	for len(rec) > 0 {
		num, typ, raw, _, rest := wire.Next(rec)
		if rest == nil {
			break
		}
		rec = rest
		if num == 5 && typ == protowire.BytesType {
			body = wire.AnyValue(raw)
		}
	}
	return body
}

// FromSpan returns the request id of a serialized Span: from its
// attributes (by the priority of AttributeKeys), else from an SGLang span
// name "… Req {rid}" (see SGLangRID). It does not allocate when there is
// none.
func (ids *RequestIDs) FromSpan(span []byte) (string, bool) {
	a := idAttr{prio: -1}
	var name []byte
	for len(span) > 0 {
		num, typ, raw, _, rest := wire.Next(span)
		if rest == nil {
			break
		}
		span = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case SpanAttrs:
			if len(ids.attrs) > 0 {
				k, v, _ := wire.KeyValue(raw)
				if a.offer(ids, k, v); a.prio == 0 {
					return a.id(ids), true // nothing can take its place
				}
			}
		case 5:
			name = raw
		}
	}
	if a.prio >= 0 {
		return a.id(ids), true
	}
	i, j, ok := sglangRID(name)
	if !ok {
		return "", false
	}
	return string(name[i:j]), true
}
