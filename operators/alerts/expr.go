package alerts

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// An expression is a condition over the figures of one group in one
// window:
//
//	expr    = or
//	or      = and { "or" and }
//	and     = cmp { "and" cmp }
//	cmp     = sum [ (">" | "<" | ">=" | "<=" | "==" | "!=") sum ]
//	sum     = product { ("+" | "-") product }
//	product = unary { ("*" | "/") unary }
//	unary   = "-" unary | primary
//	primary = number [unit] | call | "(" expr ")"
//	call    = function "(" [number ","] figure ["," duration] ")"
//
// Functions aggregate one figure over the window: p50, p90, p95, p99
// (quantiles, from a DDSketch), quantile(q, figure), avg, sum, count, min,
// max, first, last, increase (last − first) and deriv (increase per second
// between the first and the last sample). A duration as last argument
// (a number with a unit s, min, h, d or w: "avg(jailbreak, 1w)") reads
// that window ending where the rule's window ends instead of the rule's
// window (see the package documentation for windows longer than the
// rule's). Units scale a number into braid's base units (seconds, bytes,
// ratios): ms, s, min, h, d, w; %; KB, MB, GB, TB (powers of 1000), KiB,
// MiB, GiB, TiB. A figure that has no value
// in the window makes every function of it NaN, and a comparison with NaN
// is false: a rule does not fire on what it cannot see.
type expr interface {
	eval(w window) float64
}

// window is what an expression reads: the aggregate of each figure over
// the rule's window (win 0) or over the window of win ns ending with it.
type window interface {
	stat(fig string, fn string, q float64, win int64) float64
}

type number float64

func (n number) eval(window) float64 { return float64(n) }

type call struct {
	fn  string
	q   float64
	fig string
	win int64 // ns; 0: the rule's window
}

func (c *call) eval(w window) float64 { return w.stat(c.fig, c.fn, c.q, c.win) }

type binop struct {
	op   string
	l, r expr
}

func (b *binop) eval(w window) float64 {
	l := b.l.eval(w)
	switch b.op {
	case "or":
		if truth(l) {
			return 1
		}
		return bool2f(truth(b.r.eval(w)))
	case "and":
		if !truth(l) {
			return 0
		}
		return bool2f(truth(b.r.eval(w)))
	}
	r := b.r.eval(w)
	switch b.op {
	case "+":
		return l + r
	case "-":
		return l - r
	case "*":
		return l * r
	case "/":
		if r == 0 {
			return math.NaN()
		}
		return l / r
	case ">":
		return bool2f(l > r)
	case "<":
		return bool2f(l < r)
	case ">=":
		return bool2f(l >= r)
	case "<=":
		return bool2f(l <= r)
	case "==":
		return bool2f(l == r)
	case "!=":
		return bool2f(!math.IsNaN(l) && !math.IsNaN(r) && l != r)
	}
	return math.NaN()
}

type neg struct{ x expr }

func (n *neg) eval(w window) float64 { return -n.x.eval(w) }

func truth(v float64) bool { return v != 0 && !math.IsNaN(v) }

func bool2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// functions maps each function to whether it takes a quantile argument
// first, and the quantile of the pN shorthands.
var functions = map[string]float64{
	"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "quantile": -1,
	"avg": 0, "sum": 0, "count": 0, "min": 0, "max": 0, "first": 0, "last": 0,
	"increase": 0, "deriv": 0,
}

var units = map[string]float64{
	"ms": 1e-3, "s": 1, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "%": 0.01,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// compiled is a parsed expression with what it reads.
type compiled struct {
	root expr
	// value is the expression whose value an alert reports: the left
	// side of the first comparison (or the whole expression).
	value expr
	// figures read, in order of first appearance; the first one's
	// exemplars go with the alert.
	figures []string
	// quantiles: the figures a quantile is taken of (they need a sketch).
	quantiles map[string]bool
	// windows: the (figure, window) pairs read with a window argument,
	// in order of first appearance.
	windows []figWindow
}

// figWindow is a figure read over a window of its own (ns).
type figWindow struct {
	fig string
	win int64
}

// compile parses src; known reports whether a figure name exists.
func compile(src string, known func(string) bool) (*compiled, error) {
	p := &parser{src: src, known: known}
	p.next()
	root := p.parseOr()
	if p.err == nil && p.tok.kind != tokEOF {
		p.fail("unexpected %q", p.tok.text)
	}
	if p.err != nil {
		return nil, p.err
	}
	c := &compiled{root: root, value: root, figures: p.figures, quantiles: p.quantiles, windows: p.windows}
	if v := firstComparison(root); v != nil {
		c.value = v
	}
	if len(c.figures) == 0 {
		return nil, errors.New("reads no figure")
	}
	return c, nil
}

func firstComparison(e expr) expr {
	b, ok := e.(*binop)
	if !ok {
		return nil
	}
	switch b.op {
	case ">", "<", ">=", "<=", "==", "!=":
		return b.l
	case "and", "or":
		if v := firstComparison(b.l); v != nil {
			return v
		}
		return firstComparison(b.r)
	}
	return nil
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokNum
	tokIdent
	tokOp
)

type token struct {
	kind tokKind
	text string
	num  float64
	pos  int
}

type parser struct {
	src       string
	pos       int
	tok       token
	known     func(string) bool
	figures   []string
	quantiles map[string]bool
	windows   []figWindow
	err       error
}

func (p *parser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("at %d: %s", p.tok.pos+1, fmt.Sprintf(format, args...))
	}
	p.tok = token{kind: tokEOF, pos: len(p.src)}
}

func isIdentRune(r rune, first bool) bool {
	return r == '_' || r == ':' || unicode.IsLetter(r) || !first && unicode.IsDigit(r)
}

func (p *parser) next() {
	if p.err != nil {
		return
	}
	s := p.src
	for p.pos < len(s) && (s[p.pos] == ' ' || s[p.pos] == '\t' || s[p.pos] == '\n' || s[p.pos] == '\r') {
		p.pos++
	}
	start := p.pos
	if p.pos >= len(s) {
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	c := s[p.pos]
	switch {
	case c >= '0' && c <= '9' || c == '.':
		for p.pos < len(s) && (s[p.pos] >= '0' && s[p.pos] <= '9' || s[p.pos] == '.' ||
			(s[p.pos] == 'e' || s[p.pos] == 'E') && p.pos+1 < len(s) && (s[p.pos+1] >= '0' && s[p.pos+1] <= '9' || s[p.pos+1] == '-' || s[p.pos+1] == '+') ||
			(s[p.pos] == '-' || s[p.pos] == '+') && (s[p.pos-1] == 'e' || s[p.pos-1] == 'E')) {
			p.pos++
		}
		v, err := strconv.ParseFloat(s[start:p.pos], 64)
		if err != nil {
			p.tok = token{pos: start}
			p.fail("bad number %q", s[start:p.pos])
			return
		}
		// A unit directly after the number.
		u := p.pos
		for u < len(s) && (s[u] == '%' || isIdentRune(rune(s[u]), false) && s[u] < 0x80) {
			u++
			if s[u-1] == '%' {
				break
			}
		}
		if unit := s[p.pos:u]; unit != "" {
			f, ok := units[unit]
			if !ok {
				p.tok = token{pos: p.pos}
				p.fail("unknown unit %q (want one of ms, s, min, h, d, w, %%, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", unit)
				return
			}
			v *= f
			p.pos = u
		}
		p.tok = token{kind: tokNum, num: v, text: s[start:p.pos], pos: start}
	case c < 0x80 && isIdentRune(rune(c), true):
		for p.pos < len(s) && s[p.pos] < 0x80 && isIdentRune(rune(s[p.pos]), false) {
			p.pos++
		}
		p.tok = token{kind: tokIdent, text: s[start:p.pos], pos: start}
	default:
		for _, op := range []string{">=", "<=", "==", "!=", ">", "<", "+", "-", "*", "/", "(", ")", ","} {
			if strings.HasPrefix(s[p.pos:], op) {
				p.pos += len(op)
				p.tok = token{kind: tokOp, text: op, pos: start}
				return
			}
		}
		p.tok = token{pos: start}
		p.fail("unexpected character %q", s[start:start+1])
	}
}

func (p *parser) isOp(ops ...string) bool {
	if p.tok.kind != tokOp && p.tok.kind != tokIdent {
		return false
	}
	for _, op := range ops {
		if p.tok.text == op {
			return true
		}
	}
	return false
}

func (p *parser) parseOr() expr {
	l := p.parseAnd()
	for p.err == nil && p.tok.kind == tokIdent && p.tok.text == "or" {
		p.next()
		l = &binop{op: "or", l: l, r: p.parseAnd()}
	}
	return l
}

func (p *parser) parseAnd() expr {
	l := p.parseCmp()
	for p.err == nil && p.tok.kind == tokIdent && p.tok.text == "and" {
		p.next()
		l = &binop{op: "and", l: l, r: p.parseCmp()}
	}
	return l
}

func (p *parser) parseCmp() expr {
	l := p.parseSum()
	if p.err == nil && p.tok.kind == tokOp && p.isOp(">", "<", ">=", "<=", "==", "!=") {
		op := p.tok.text
		p.next()
		return &binop{op: op, l: l, r: p.parseSum()}
	}
	return l
}

func (p *parser) parseSum() expr {
	l := p.parseProduct()
	for p.err == nil && p.tok.kind == tokOp && p.isOp("+", "-") {
		op := p.tok.text
		p.next()
		l = &binop{op: op, l: l, r: p.parseProduct()}
	}
	return l
}

func (p *parser) parseProduct() expr {
	l := p.parseUnary()
	for p.err == nil && p.tok.kind == tokOp && p.isOp("*", "/") {
		op := p.tok.text
		p.next()
		l = &binop{op: op, l: l, r: p.parseUnary()}
	}
	return l
}

func (p *parser) parseUnary() expr {
	if p.tok.kind == tokOp && p.tok.text == "-" {
		p.next()
		return &neg{x: p.parseUnary()}
	}
	return p.parsePrimary()
}

// durationUnits are the units a window argument may have.
var durationUnits = []string{"s", "min", "h", "d", "w"}

// duration reads a window argument: a positive number with a unit of
// durationUnits, returned in ns.
func (p *parser) duration() int64 {
	if p.tok.kind != tokNum {
		p.fail("a window must be a duration, e.g. 1h or 1w")
		return 0
	}
	text := p.tok.text
	i := len(text)
	for i > 0 && (text[i-1] >= 'a' && text[i-1] <= 'z' || text[i-1] >= 'A' && text[i-1] <= 'Z' || text[i-1] == '%') {
		i--
	}
	if !slices.Contains(durationUnits, text[i:]) {
		p.fail("window %q needs a unit s, min, h, d or w", text)
		return 0
	}
	ns := math.Round(p.tok.num * 1e9)
	if !(ns >= 1) || ns > math.MaxInt64/2 {
		p.fail("window %q is not a positive duration", text)
		return 0
	}
	p.next()
	return int64(ns)
}

func (p *parser) parsePrimary() expr {
	switch p.tok.kind {
	case tokNum:
		n := number(p.tok.num)
		p.next()
		return n
	case tokOp:
		if p.tok.text == "(" {
			p.next()
			e := p.parseOr()
			if p.tok.kind != tokOp || p.tok.text != ")" {
				p.fail("missing )")
				return number(0)
			}
			p.next()
			return e
		}
	case tokIdent:
		name := p.tok.text
		dq, ok := functions[name]
		if !ok {
			p.fail("unknown function %q (a figure must be inside a function, e.g. avg(%s))", name, name)
			return number(0)
		}
		p.next()
		if p.tok.kind != tokOp || p.tok.text != "(" {
			p.fail("%s needs (", name)
			return number(0)
		}
		p.next()
		c := &call{fn: name, q: dq}
		if dq < 0 {
			if p.tok.kind != tokNum || p.tok.num < 0 || p.tok.num > 1 {
				p.fail("quantile needs a number in [0, 1] first")
				return number(0)
			}
			c.q = p.tok.num
			p.next()
			if p.tok.kind != tokOp || p.tok.text != "," {
				p.fail("quantile(q, figure) needs a comma")
				return number(0)
			}
			p.next()
			c.fn = "quantile"
		} else if dq > 0 {
			c.fn = "quantile"
		}
		if p.tok.kind != tokIdent {
			p.fail("%s needs a figure", name)
			return number(0)
		}
		c.fig = p.tok.text
		if p.known != nil && !p.known(c.fig) {
			p.fail("unknown figure %q", c.fig)
			return number(0)
		}
		p.next()
		if p.tok.kind == tokOp && p.tok.text == "," {
			p.next()
			if c.win = p.duration(); p.err != nil {
				return number(0)
			}
			fw := figWindow{fig: c.fig, win: c.win}
			if !slices.Contains(p.windows, fw) {
				p.windows = append(p.windows, fw)
			}
		}
		if p.tok.kind != tokOp || p.tok.text != ")" {
			p.fail("missing ) after %s", c.fig)
			return number(0)
		}
		p.next()
		if c.fn == "quantile" {
			if p.quantiles == nil {
				p.quantiles = map[string]bool{}
			}
			p.quantiles[c.fig] = true
		}
		found := false
		for _, f := range p.figures {
			found = found || f == c.fig
		}
		if !found {
			p.figures = append(p.figures, c.fig)
		}
		return c
	}
	if p.tok.kind == tokEOF {
		p.fail("unexpected end")
	} else {
		p.fail("unexpected %q", p.tok.text)
	}
	return number(0)
}
