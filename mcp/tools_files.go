package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// File tools: the HTTP file API's operations (DESIGN.md §5), with its
// paths (relative to the workspace, or under /workspace/), limits, codes
// and audit records: each calls the manager's file operation, as the HTTP
// handlers do.

type readFileInput struct {
	Path      string `json:"path" jsonschema:"file to read, relative to /workspace or under /workspace/"`
	Offset    int    `json:"offset,omitempty" jsonschema:"first line to return, counting from 0"`
	Limit     int    `json:"limit,omitempty" jsonschema:"number of lines to return; default 2000"`
	SessionID string `json:"session_id,omitempty"`
}

type readFileOutput struct {
	Path       string `json:"path"`
	Content    string `json:"content" jsonschema:"the lines, each prefixed with its number and a tab"`
	TotalLines int    `json:"total_lines"`
	Truncated  bool   `json:"truncated"`
	NextOffset int    `json:"next_offset,omitempty" jsonschema:"offset of the next page, when lines remain"`
	RequestID  string `json:"request_id"`
}

type writeFileInput struct {
	Path      string `json:"path" jsonschema:"file to write; parent directories are created"`
	Content   string `json:"content" jsonschema:"the text to write (UTF-8)"`
	Mode      string `json:"mode,omitempty" jsonschema:"overwrite (default), create (fails if it exists) or append"`
	SessionID string `json:"session_id,omitempty"`
}

type writeFileOutput struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Written   int64  `json:"written"`
	Created   bool   `json:"created"`
	RequestID string `json:"request_id"`
}

type editFileInput struct {
	Path       string `json:"path"`
	Old        string `json:"old" jsonschema:"exact text to replace; it must occur once unless replace_all"`
	New        string `json:"new" jsonschema:"replacement text (may be empty)"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
	SessionID  string `json:"session_id,omitempty"`
}

type editFileOutput struct {
	Path        string `json:"path"`
	Occurrences int    `json:"occurrences"`
	Size        int64  `json:"size"`
	RequestID   string `json:"request_id"`
}

type lsInput struct {
	Path      string `json:"path,omitempty" jsonschema:"directory to list; default /workspace"`
	Depth     int    `json:"depth,omitempty" jsonschema:"levels to descend; default 1"`
	SessionID string `json:"session_id,omitempty"`
}

type globInput struct {
	Pattern   string `json:"pattern" jsonschema:"glob such as **/*.py, relative to path"`
	Path      string `json:"path,omitempty" jsonschema:"directory to search; default /workspace"`
	SessionID string `json:"session_id,omitempty"`
}

type listOutput struct {
	Path      string      `json:"path"`
	Entries   []entryView `json:"entries"`
	Truncated bool        `json:"truncated"`
	RequestID string      `json:"request_id"`
}

type entryView struct {
	Path     string `json:"path"`
	Type     string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size     int64  `json:"size"`
	Modified string `json:"modified" jsonschema:"RFC 3339"`
}

type grepInput struct {
	Pattern   string `json:"pattern"`
	Path      string `json:"path,omitempty" jsonschema:"directory or file to search; default /workspace"`
	Glob      string `json:"glob,omitempty" jsonschema:"only search files matching this glob"`
	Literal   *bool  `json:"literal,omitempty" jsonschema:"pattern is a fixed string (default true); false: a regular expression"`
	SessionID string `json:"session_id,omitempty"`
}

type grepOutput struct {
	Path         string                `json:"path"`
	Matches      []workspace.GrepMatch `json:"matches"`
	Truncated    bool                  `json:"truncated"`
	FilesScanned int                   `json:"files_scanned"`
	RequestID    string                `json:"request_id"`
}

type deleteFileInput struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"also delete a directory and everything in it"`
	SessionID string `json:"session_id,omitempty"`
}

type deleteFileOutput struct {
	Path      string `json:"path"`
	Deleted   bool   `json:"deleted"`
	Size      int64  `json:"size"`
	RequestID string `json:"request_id"`
}

func (s *Server) addFileTools() {
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}
	addTool(s, &sdk.Tool{Name: "read_file", Title: "Read a file", Annotations: ro,
		Description: "Read a text file of the workspace as numbered lines (offset and limit page through it)."}, nil, s.readFile)
	addTool(s, &sdk.Tool{Name: "write_file", Title: "Write a file",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
		Description: "Write text to a file of the workspace, creating parent directories. Code run later in the same " +
			"session sees it under /workspace."},
		func(in *jsonschema.Schema) { setEnum(in, "mode", "overwrite", "create", "append") }, s.writeFile)
	addTool(s, &sdk.Tool{Name: "edit_file", Title: "Edit a file",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: false, OpenWorldHint: new(false)},
		Description: "Replace an exact string in a workspace file: one occurrence, or every one with replace_all."},
		nil, s.editFile)
	addTool(s, &sdk.Tool{Name: "ls", Title: "List a directory", Annotations: ro,
		Description: "List a workspace directory (depth levels down)."}, nil, s.ls)
	addTool(s, &sdk.Tool{Name: "glob", Title: "Find files", Annotations: ro,
		Description: "Find workspace files whose path matches a glob."}, nil, s.glob)
	addTool(s, &sdk.Tool{Name: "grep", Title: "Search files", Annotations: ro,
		Description: "Search workspace files for a fixed string (or a regular expression with literal=false)."}, nil, s.grep)
	addTool(s, &sdk.Tool{Name: "delete_file", Title: "Delete a file",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
		Description: "Delete a workspace file, a symlink or an empty directory (any directory with recursive)."},
		nil, s.deleteFile)
}

func (c *call) fileReq(session, path string) manager.FileRequest {
	return manager.FileRequest{RequestID: c.requestID, Principal: c.principal, SessionID: c.session(session), Path: path}
}

func (s *Server) readFile(ctx context.Context, c *call, in readFileInput) (readFileOutput, reply, error) {
	limit := in.Limit
	if limit <= 0 {
		limit = workspace.DefaultReadLines
	}
	page, err := s.deps.Manager.ReadFile(ctx, c.fileReq(in.SessionID, in.Path), max(in.Offset, 0), limit)
	if err != nil {
		return readFileOutput{}, reply{}, err
	}
	out := readFileOutput{Path: shownPath(in.Path), Content: page.Content, TotalLines: page.TotalLines,
		Truncated: page.Truncated, NextOffset: page.NextOffset, RequestID: c.requestID}
	text := page.Content
	if page.NextOffset > 0 {
		text += fmt.Sprintf("\n(%d lines in all; continue with offset %d)", page.TotalLines, page.NextOffset)
	}
	return out, reply{text: text}, nil
}

func (s *Server) writeFile(ctx context.Context, c *call, in writeFileInput) (writeFileOutput, reply, error) {
	mode, err := workspace.ParseWriteMode(in.Mode)
	if err != nil {
		return writeFileOutput{}, reply{}, fieldError("mode", "oneof", "must be one of: overwrite, create, append")
	}
	res, err := s.deps.Manager.WriteFile(ctx, c.fileReq(in.SessionID, in.Path), mode, strings.NewReader(in.Content))
	if err != nil {
		return writeFileOutput{}, reply{}, err
	}
	out := writeFileOutput{Path: shownPath(in.Path), Size: res.Size, Written: res.Written, Created: res.Created, RequestID: c.requestID}
	return out, reply{text: fmt.Sprintf("wrote %d bytes to %s (now %d bytes)", res.Written, out.Path, res.Size)}, nil
}

func (s *Server) editFile(ctx context.Context, c *call, in editFileInput) (editFileOutput, reply, error) {
	res, err := s.deps.Manager.EditFile(ctx, c.fileReq(in.SessionID, in.Path), in.Old, in.New, in.ReplaceAll)
	if err != nil {
		return editFileOutput{}, reply{}, err
	}
	out := editFileOutput{Path: shownPath(in.Path), Occurrences: res.Occurrences, Size: res.Size, RequestID: c.requestID}
	return out, reply{text: fmt.Sprintf("replaced %d occurrence(s) in %s", res.Occurrences, out.Path)}, nil
}

func (s *Server) ls(ctx context.Context, c *call, in lsInput) (listOutput, reply, error) {
	l, err := s.deps.Manager.ListFiles(ctx, c.fileReq(in.SessionID, in.Path), max(in.Depth, 1))
	if err != nil {
		return listOutput{}, reply{}, err
	}
	return listing(c, in.Path, l)
}

func (s *Server) glob(ctx context.Context, c *call, in globInput) (listOutput, reply, error) {
	l, err := s.deps.Manager.GlobFiles(ctx, c.fileReq(in.SessionID, in.Path), in.Pattern)
	if err != nil {
		return listOutput{}, reply{}, err
	}
	return listing(c, in.Path, l)
}

func listing(c *call, path string, l workspace.Listing) (listOutput, reply, error) {
	out := listOutput{Path: shownPath(path), Entries: make([]entryView, len(l.Entries)), Truncated: l.Truncated, RequestID: c.requestID}
	var b strings.Builder
	for i, e := range l.Entries {
		out.Entries[i] = entryView{Path: e.Path, Type: e.Type, Size: e.Size, Modified: e.Modified.UTC().Format(time.RFC3339)}
		suffix := ""
		if e.Type == "dir" {
			suffix = "/"
		}
		fmt.Fprintf(&b, "%s%s\t%s\t%d\n", e.Path, suffix, e.Type, e.Size)
	}
	if len(l.Entries) == 0 {
		b.WriteString("(no entries)\n")
	}
	if l.Truncated {
		b.WriteString("(truncated)\n")
	}
	return out, reply{text: b.String()}, nil
}

func (s *Server) grep(ctx context.Context, c *call, in grepInput) (grepOutput, reply, error) {
	literal := in.Literal == nil || *in.Literal
	res, err := s.deps.Manager.GrepFiles(ctx, c.fileReq(in.SessionID, in.Path),
		workspace.GrepQuery{Pattern: in.Pattern, Glob: in.Glob, Literal: literal})
	if err != nil {
		return grepOutput{}, reply{}, err
	}
	out := grepOutput{Path: shownPath(in.Path), Matches: res.Matches, Truncated: res.Truncated,
		FilesScanned: res.FilesScanned, RequestID: c.requestID}
	if out.Matches == nil {
		out.Matches = []workspace.GrepMatch{}
	}
	var b strings.Builder
	for _, m := range res.Matches {
		fmt.Fprintf(&b, "%s:%d:%s\n", m.Path, m.Line, m.Text)
	}
	fmt.Fprintf(&b, "(%d matches in %d files scanned", len(res.Matches), res.FilesScanned)
	if res.Truncated {
		b.WriteString(", truncated")
	}
	b.WriteString(")")
	return out, reply{text: b.String()}, nil
}

func (s *Server) deleteFile(ctx context.Context, c *call, in deleteFileInput) (deleteFileOutput, reply, error) {
	res, err := s.deps.Manager.DeleteFile(ctx, c.fileReq(in.SessionID, in.Path), in.Recursive)
	if err != nil {
		return deleteFileOutput{}, reply{}, err
	}
	out := deleteFileOutput{Path: shownPath(in.Path), Deleted: true, Size: res.Size, RequestID: c.requestID}
	return out, reply{text: "deleted " + out.Path}, nil
}

// shownPath is a path as code sees it (/workspace/...). It is only called
// for paths an operation accepted, which therefore resolve.
func shownPath(p string) string {
	rel, err := workspace.ResolvePath(p)
	if err != nil {
		return ""
	}
	return workspace.DisplayPath(rel)
}

// fieldError is a one-argument validation error.
func fieldError(field, code, msg string) error {
	return &manager.ValidationError{Kind: manager.ErrInvalidRequest, Fields: []manager.FieldError{{Field: field, Code: code, Message: msg}}}
}
