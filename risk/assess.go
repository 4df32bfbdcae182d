package risk

import (
	"errors"
	"fmt"
)

// MaxAnalyzedSize is the largest input that is analysed. The manager caps
// code at 256 KiB, so anything bigger reached us around that check; deep
// analysis of it would only let an attacker buy CPU time on the gateway.
// Such input is CRITICAL with the single pattern obfuscation.oversize.
const MaxAnalyzedSize = 1 << 20

// ErrUnknownLanguage is returned (wrapped) for any language other than
// python, bash or javascript. The package never guesses a language: a
// wrong guess would analyse the code with the wrong tokenizer.
var ErrUnknownLanguage = errors.New("risk: unknown language")

// Pattern is one finding. Line is 1-based; 0 means the finding concerns
// the input as a whole (oversize input, admin rules).
type Pattern struct {
	ID      string `json:"id"`
	Message string `json:"message"`
	Line    int    `json:"line"`
	Level   Level  `json:"level"`
}

// Assessment is the result of a static analysis. Level is the maximum of
// the pattern levels, and at least LOW unless ProvenSafe. Patterns is
// never nil and is sorted by line, then id.
type Assessment struct {
	Level      Level     `json:"level"`
	ProvenSafe bool      `json:"proven_safe"`
	Patterns   []Pattern `json:"patterns"`
}

// analysis is the working state of one Assess call.
type analysis struct {
	lang    string
	raw     *rawSet
	src     *source
	c       collector
	imports []string
	calls   []string
	proven  bool
}

type language struct {
	raw     rawSet
	analyze func(*analysis)
}

func lookupLanguage(name string) (*language, error) {
	switch name {
	case "python":
		return &pythonLang, nil
	case "bash":
		return &bashLang, nil
	case "javascript":
		return &jsLang, nil
	}
	if len(name) > 32 {
		name = name[:32] + "..."
	}
	return nil, fmt.Errorf("%w %q (want python, bash or javascript)", ErrUnknownLanguage, name)
}

// Assess analyses code with the built-in checks only. On error the returned
// Assessment is CRITICAL, so a caller that forgets the error still escalates.
func Assess(code, language string) (Assessment, error) {
	a, err := analyze(code, language)
	if err != nil {
		return failed(), err
	}
	return a.assessment(), nil
}

func failed() Assessment {
	return Assessment{Level: CRITICAL, Patterns: []Pattern{}}
}

func analyze(code, lang string) (a *analysis, err error) {
	l, err := lookupLanguage(lang)
	if err != nil {
		return nil, err
	}
	defer func() {
		// The analysers are fuzzed and must not panic; if one still does,
		// fail closed instead of taking the request (or the gateway) down.
		if r := recover(); r != nil {
			a = &analysis{lang: lang, src: &source{}}
			a.c.add("obfuscation.analysis_failed", 0)
		}
	}()
	if len(code) > MaxAnalyzedSize {
		a = &analysis{lang: lang, src: &source{}}
		a.c.add("obfuscation.oversize", 0)
		return a, nil
	}
	a = &analysis{lang: lang, raw: &l.raw}
	ascii := scanText(code, &a.c)
	a.src = newSource(code, ascii)
	scanShared(a.src, &a.c)
	l.analyze(a)
	return a, nil
}

// rawPatterns runs the language's raw patterns. Languages call it after
// their token checks (so windows on lines the tokens already reported are
// skipped) and before the SAFE proof (which needs to know of any hit).
func (a *analysis) rawPatterns() { runRaw(a.raw, a.src, &a.c) }

func (a *analysis) assessment() Assessment {
	ps := a.c.patterns()
	if len(ps) == 0 && a.proven {
		return Assessment{Level: SAFE, ProvenSafe: true, Patterns: ps}
	}
	lvl := LOW
	for _, p := range ps {
		lvl = maxLevel(lvl, p.Level)
	}
	return Assessment{Level: lvl, Patterns: ps}
}
