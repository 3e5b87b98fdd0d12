package report

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// LLM is an OpenAI-compatible chat-completions endpoint (vLLM serves one:
// POST {URL}/v1/chat/completions).
type LLM struct {
	URL     string        // base URL, e.g. http://vllm:8000
	Model   string        // model name the endpoint serves
	APIKey  string        // sent as a bearer token when set
	Timeout time.Duration // default 60 s
	// MaxTokens bounds the summary (default 600).
	MaxTokens int
	Client    *http.Client
}

// Summary is the generated summary, or why there is none.
type Summary struct {
	Model  string `json:"model"`
	Text   string `json:"text,omitempty"`
	Prompt string `json:"prompt"` // the prompt sent, kept in the report
	Error  string `json:"error,omitempty"`
}

const systemPrompt = "You are an SRE assistant for LLM inference fleets. From the structured incident report and the retrieved known failure modes, write a short diagnostic summary for the inference team: what happened, the evidence, the blast radius, the most likely known cause among those retrieved (say which, and say if none fits), and what to check or change next. Cite request ids and Kafka coordinates from the report; do not invent facts that are not in it."

// Prompt is the user message: the structured report (without any
// summary) and the retrieved entries, as JSON.
func Prompt(r *Report) string {
	type known struct {
		ID, Title, Signature, Engines string
		Score                         float64
		Body                          string
	}
	in := struct {
		Incident any     `json:"incident"`
		Known    []known `json:"known_failure_modes"`
	}{}
	cp := *r
	cp.Summary, cp.Known = nil, nil
	cp.Heatmap.HitRatio, cp.Heatmap.DecodeMs, cp.Heatmap.Times = nil, nil, nil
	in.Incident = cp
	for _, m := range r.Known {
		in.Known = append(in.Known, known{ID: m.Entry.ID, Title: m.Entry.Title, Signature: m.Entry.Signature, Engines: m.Entry.Engines, Score: m.Score, Body: m.Entry.Body})
	}
	b, _ := json.MarshalIndent(in, "", " ")
	return string(b)
}

// Summarize asks the endpoint for a summary of r. It never fails the
// report: a timeout or an error comes back in Summary.Error.
func (l *LLM) Summarize(ctx context.Context, r *Report) *Summary {
	prompt := Prompt(r)
	s := &Summary{Model: l.Model, Prompt: systemPrompt + "\n\n" + prompt}
	body, _ := json.Marshal(map[string]any{
		"model": l.Model,
		"messages": []map[string]string{
			{"role": "system", "content": systemPrompt},
			{"role": "user", "content": prompt},
		},
		"temperature": 0,
		"max_tokens":  cmp.Or(l.MaxTokens, 600),
	})
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(l.Timeout, 60*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.URL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		s.Error = err.Error()
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	if l.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.APIKey)
	}
	cl := l.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		s.Error = fmt.Sprintf("summary endpoint: %v", err)
		return s
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		s.Error = fmt.Sprintf("summary endpoint: %v", err)
		return s
	}
	if resp.StatusCode != http.StatusOK {
		s.Error = fmt.Sprintf("summary endpoint: %s: %s", resp.Status, strings.TrimSpace(string(raw[:min(len(raw), 300)])))
		return s
	}
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		s.Error = fmt.Sprintf("summary endpoint: response: %v", err)
		return s
	}
	if len(out.Choices) == 0 || strings.TrimSpace(out.Choices[0].Message.Content) == "" {
		s.Error = "summary endpoint: response without a message"
		return s
	}
	s.Text = strings.TrimSpace(out.Choices[0].Message.Content)
	s.Model = cmp.Or(out.Model, l.Model)
	return s
}
