package deerflow

import (
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
)

// The AIO sandbox HTTP API shapes a DeerFlow sandbox_url serves (the
// agent-infra/sandbox OpenAPI, as ../shared/research/aio-api.md records it).
// Requests are decoded leniently, like the FastAPI server's: fields sandgate
// does not use (sudo, no_change_timeout, show_hidden...) are accepted and
// ignored, and the ones it cannot honour (async_mode) are refused.

// aioResponse is the AIO envelope, Response[T].
type aioResponse[T any] struct {
	Success bool    `json:"success"`
	Message string  `json:"message"`
	Data    T       `json:"data"`
	Hint    *string `json:"hint"`
}

// aioErrorBody answers a call that failed before or outside the tool (bad
// request, denied, no such sandbox...): the envelope with success false
// and no data, at the HTTP status of the error, plus sandgate's error
// object with its stable code.
type aioErrorBody struct {
	Success bool        `json:"success"`
	Message string      `json:"message"`
	Data    *struct{}   `json:"data"`
	Hint    *string     `json:"hint"`
	Error   errorDetail `json:"error"`
}

// aioFileError is the data of a file call the workspace refused (no such
// file, a path outside the workspace, over quota): HTTP 200 with success
// false, as AIO 1.9 answers expected filesystem failures. Code is
// sandgate's error code.
type aioFileError struct {
	Path      string  `json:"path"`
	Operation string  `json:"operation"`
	Message   string  `json:"message"`
	ErrorType string  `json:"error_type"`
	Retryable bool    `json:"retryable"`
	Errno     *int    `json:"errno"`
	ErrnoName *string `json:"errno_name"`
	Code      string  `json:"code"`
}

type (
	aioShellExecBody struct {
		Command     string   `json:"command"`
		ID          *string  `json:"id"`
		ExecDir     *string  `json:"exec_dir"`
		AsyncMode   bool     `json:"async_mode"`
		HardTimeout *float64 `json:"hard_timeout"`
	}
	aioConsoleRecord struct {
		PS1     string `json:"ps1"`
		Command string `json:"command"`
		Output  string `json:"output"`
	}
	aioShellResult struct {
		SessionID string             `json:"session_id"`
		Command   string             `json:"command"`
		Status    string             `json:"status"`
		Output    string             `json:"output"`
		ExitCode  *int               `json:"exit_code"`
		Console   []aioConsoleRecord `json:"console"`
		XSandgate aioRunExtension    `json:"x_sandgate"`
	}
	// aioRunExtension is what sandgate adds to a shell result: the
	// pipeline's view of the run.
	aioRunExtension struct {
		RequestID   string          `json:"request_id"`
		SandboxType string          `json:"sandbox_type"`
		Truncated   bool            `json:"truncated"`
		TimedOut    bool            `json:"timed_out"`
		Risk        risk.Assessment `json:"risk"`
		Decision    decisionView    `json:"decision"`
		Approval    *approvalView   `json:"approval"`
	}
	aioShellSessionBody struct {
		ID *string `json:"id"`
	}
	aioShellSession struct {
		SessionID  string `json:"session_id"`
		WorkingDir string `json:"working_dir"`
	}
)

type (
	aioFileReadBody struct {
		File      string `json:"file"`
		StartLine *int   `json:"start_line"`
		EndLine   *int   `json:"end_line"`
	}
	aioFileRead struct {
		Content string `json:"content"`
		File    string `json:"file"`
	}
	aioFileWriteBody struct {
		File            string  `json:"file"`
		Content         *string `json:"content"`
		Encoding        string  `json:"encoding"`
		Append          bool    `json:"append"`
		LeadingNewline  bool    `json:"leading_newline"`
		TrailingNewline bool    `json:"trailing_newline"`
	}
	aioFileWrite struct {
		File         string `json:"file"`
		BytesWritten int64  `json:"bytes_written"`
	}
	aioFileListBody struct {
		Path       string   `json:"path"`
		Recursive  bool     `json:"recursive"`
		ShowHidden *bool    `json:"show_hidden"`
		FileTypes  []string `json:"file_types"`
		MaxDepth   *int     `json:"max_depth"`
	}
	aioFileInfo struct {
		Name         string  `json:"name"`
		Path         string  `json:"path"`
		IsDirectory  bool    `json:"is_directory"`
		Size         *int64  `json:"size"`
		ModifiedTime string  `json:"modified_time"`
		Extension    *string `json:"extension"`
	}
	aioFileList struct {
		Path           string        `json:"path"`
		Files          []aioFileInfo `json:"files"`
		TotalCount     int           `json:"total_count"`
		DirectoryCount int           `json:"directory_count"`
		FileCount      int           `json:"file_count"`
		Truncated      bool          `json:"truncated"`
	}
	aioFileFindBody struct {
		Path string `json:"path"`
		Glob string `json:"glob"`
	}
	aioFileFind struct {
		Path      string   `json:"path"`
		Files     []string `json:"files"`
		Truncated bool     `json:"truncated"`
	}
	aioFileSearchBody struct {
		File  string `json:"file"`
		Regex string `json:"regex"`
	}
	aioFileSearch struct {
		File        string   `json:"file"`
		Matches     []string `json:"matches"`
		LineNumbers []int    `json:"line_numbers"`
		Truncated   bool     `json:"truncated"`
	}
	aioFileGrepBody struct {
		Path            string   `json:"path"`
		Pattern         string   `json:"pattern"`
		Include         []string `json:"include"`
		CaseInsensitive bool     `json:"case_insensitive"`
		FixedStrings    bool     `json:"fixed_strings"`
		MaxResults      *int     `json:"max_results"`
	}
	aioGrepMatch struct {
		File        string `json:"file"`
		LineNumber  int    `json:"line_number"`
		LineContent string `json:"line_content"`
	}
	aioFileGrep struct {
		Path          string         `json:"path"`
		Pattern       string         `json:"pattern"`
		Matches       []aioGrepMatch `json:"matches"`
		MatchCount    int            `json:"match_count"`
		FilesSearched int            `json:"files_searched"`
		Truncated     bool           `json:"truncated"`
	}
	aioFileReplaceBody struct {
		File   string `json:"file"`
		OldStr string `json:"old_str"`
		NewStr string `json:"new_str"`
	}
	aioFileReplace struct {
		File          string `json:"file"`
		ReplacedCount int    `json:"replaced_count"`
	}
)

// aioSandboxInfo is GET /v1/sandbox: the readiness probe DeerFlow polls and
// the context it reads home_dir from (top level, not in data).
type aioSandboxInfo struct {
	Success   bool             `json:"success"`
	Message   string           `json:"message"`
	Data      string           `json:"data"`
	Hint      *string          `json:"hint"`
	HomeDir   string           `json:"home_dir"`
	Workspace string           `json:"workspace"`
	Version   string           `json:"version"`
	Detail    aioSandboxDetail `json:"detail"`
}

type aioSandboxDetail struct {
	System aioSandboxSystem `json:"system"`
}

type aioSandboxSystem struct {
	HomeDir   string `json:"home_dir"`
	Workspace string `json:"workspace"`
	SessionID string `json:"session_id"`
}

// decisionView and approvalView are the policy's decision and the
// approval as the REST API's run responses show them.
type decisionView struct {
	Action         string             `json:"action"`
	Executor       string             `json:"executor"`
	Reasons        []policy.Reason    `json:"reasons"`
	Obligations    policy.Obligations `json:"obligations"`
	PolicyRevision string             `json:"policy_revision"`
}

type approvalView struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	DecidedBy string `json:"decided_by,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func viewDecision(d policy.Decision) decisionView {
	reasons := d.Reasons
	if reasons == nil {
		reasons = []policy.Reason{}
	}
	return decisionView{Action: d.Action, Executor: d.Executor, Reasons: reasons,
		Obligations: d.Obligations, PolicyRevision: d.PolicyRevision}
}

func viewApproval(o *confirm.Outcome) *approvalView {
	if o == nil {
		return nil
	}
	return &approvalView{ID: o.ApprovalID, Status: o.Status, DecidedBy: o.DecidedBy, Reason: o.Reason}
}
