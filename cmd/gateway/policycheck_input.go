package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/sandgate/sandgate/policy"
)

// policyStdin is what `--input -` reads (tests replace it).
var policyStdin io.Reader = os.Stdin

// maxInputDocument bounds a raw input document: the gateway's own inputs
// are a few kilobytes.
const maxInputDocument = 1 << 20

// inputCheckOutput is what `sandgate policy check --input ... --json`
// prints: the decision asked and the decision document.
type inputCheckOutput struct {
	Revision       string `json:"revision"`
	BundleRevision string `json:"bundle_revision,omitempty"`
	Kind           string `json:"kind"`
	Decision       any    `json:"decision"`
}

// checkInputDocument is `sandgate policy check --input FILE|-`: the raw
// input document, valid under the gateway's input schema of the decision
// (policy/schemas), decided by the policy folder or bundle, with nothing
// logged. It is how an administrator replays an input from a decision
// log, or tries a browser or egress request, which --code cannot express.
func checkInputDocument(ctx context.Context, src, kind, pol string, cfg Config, asJSON bool, stdout io.Writer) error {
	doc, err := readInputDocument(src)
	if err != nil {
		return err
	}
	e, bundleRev, err := policyTarget(ctx, pol, cfg)
	if err != nil {
		return err
	}
	res, err := e.CheckInput(ctx, kind, doc)
	if err != nil {
		return err
	}
	out := inputCheckOutput{Revision: e.Revision(), BundleRevision: bundleRev, Kind: res.Kind, Decision: res.Decision}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printInputDecision(stdout, out)
	return nil
}

func readInputDocument(src string) ([]byte, error) {
	var r io.Reader = policyStdin
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return nil, fmt.Errorf("--input: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInputDocument+1))
	if err != nil {
		return nil, fmt.Errorf("--input: %w", err)
	}
	if len(b) > maxInputDocument {
		return nil, fmt.Errorf("--input: the document is larger than %d bytes", maxInputDocument)
	}
	return b, nil
}

// printInputDecision writes the decision as `policy check` does for code:
// the action (and what it would be if its dryrun and warn reasons were
// enforced), the reasons with their modes, and what else the decision
// says for its kind.
func printInputDecision(w io.Writer, out inputCheckOutput) {
	var action, wouldBe, extra string
	var reasons []policy.Reason
	switch d := out.Decision.(type) {
	case policy.Decision:
		action, wouldBe, reasons = d.Action, d.WouldBe, d.Reasons
		o := d.Obligations
		extra = fmt.Sprintf("obligations network=%t timeout_s=%d memory_mb=%d max_procs=%d\n", o.Network, o.TimeoutS, o.MemoryMB, o.MaxProcs)
		action += " (executor " + d.Executor + ")"
	case policy.BrowserDecision:
		action, wouldBe, reasons = d.Action, d.WouldBe, d.Reasons
	case policy.EgressDecision:
		action, reasons = d.Action, d.Reasons
		extra = fmt.Sprintf("rule %s", d.Rule)
		if d.Inspect {
			extra += " (inspect each HTTP request)"
		}
		extra += "\n"
	}
	fmt.Fprintf(w, "%s decision %s", out.Kind, action)
	if wouldBe != "" {
		fmt.Fprintf(w, ", would be %s if enforced", wouldBe)
	}
	fmt.Fprintln(w)
	for _, r := range reasons {
		mode := ""
		if r.Enforcement != "" {
			mode = " [" + r.Enforcement + "]"
		}
		fmt.Fprintf(w, "  %s%s: %s\n", r.Code, mode, r.Message)
	}
	fmt.Fprintf(w, "%spolicy %s", extra, out.Revision)
	if out.BundleRevision != "" {
		fmt.Fprintf(w, " (bundle revision %s)", out.BundleRevision)
	}
	fmt.Fprintln(w)
}
