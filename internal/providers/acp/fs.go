package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/governance"
)

// The client's file system (ACP fs/read_text_file, fs/write_text_file):
// an agent reads and writes text files only inside its child's workspace
// (the cwd it runs in, symlinks resolved), and each access passes the
// approvals policy as a permission request of kind read or edit would —
// asked about, decided by a rule, or declined — and is recorded in the
// child's log with it (acp/permission, approval/requested, approval/decided).

// maxFileBytes bounds a file read or written through the client.
const maxFileBytes = 8 << 20

// fsOptions are the answers to a file access, which no agent offers.
var fsOptions = []sdk.PermissionOption{
	{OptionId: "allow", Name: "Allow", Kind: sdk.PermissionOptionKindAllowOnce},
	{OptionId: "allow-always", Name: "Always allow", Kind: sdk.PermissionOptionKindAllowAlways},
	{OptionId: "reject", Name: "Reject", Kind: sdk.PermissionOptionKindRejectOnce},
}

// errDenied is the agent's answer to an access the policy or a person
// declined, or that came when no turn runs.
func errDenied(op, path string) error {
	return &sdk.RequestError{Code: -32001, Message: "Permission denied", Data: map[string]any{"path": path, "reason": op + " was not allowed"}}
}

// jail returns path as the file to access: absolute, inside root with its
// symlinks resolved. A file to write may not exist yet; its directory must,
// and it must not be a symlink. Returns an invalid-params error for the
// agent naming the path, the same words for every path outside, so the
// answer tells nothing about the file system beyond the workspace.
func jail(root, path string, write bool) (string, error) {
	outside := sdk.NewInvalidParams(map[string]any{"path": path, "reason": "must be an absolute path inside the workspace " + root})
	if !filepath.IsAbs(path) {
		return "", outside
	}
	clean := filepath.Clean(path)
	if !within(root, clean) {
		return "", outside
	}
	real, err := filepath.EvalSymlinks(clean)
	if errors.Is(err, fs.ErrNotExist) && write {
		var dir string
		if dir, err = filepath.EvalSymlinks(filepath.Dir(clean)); err == nil {
			real = filepath.Join(dir, filepath.Base(clean))
			if _, lerr := os.Lstat(real); lerr == nil {
				return "", outside // a dangling symlink: it would lead anywhere
			}
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", sdk.NewInvalidParams(map[string]any{"path": path, "reason": "no such file"})
		}
		return "", outside
	}
	if !within(root, real) {
		return "", outside
	}
	return real, nil
}

// within reports whether path lies in dir (or is dir).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// permit asks the connection's owner, as a permission request of kind for
// a tool call titled title, whether the agent may access path; input is
// the request's raw input.
func (c *client) permit(kind sdk.ToolKind, title, path string, input map[string]any) bool {
	c.mu.Lock()
	c.fsCalls++
	id, h := fmt.Sprintf("fs-%d", c.fsCalls), c.h
	c.mu.Unlock()
	resp := h.requestPermission(sdk.RequestPermissionRequest{Options: fsOptions, ToolCall: sdk.ToolCallUpdate{
		ToolCallId: sdk.ToolCallId(id), Title: &title, Kind: &kind,
		Locations: []sdk.ToolCallLocation{{Path: path}}, RawInput: input,
	}})
	s := resp.Outcome.Selected
	return s != nil && (s.OptionId == "allow" || s.OptionId == "allow-always")
}

func (c *client) ReadTextFile(_ context.Context, req sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	path, err := jail(c.root, req.Path, false)
	if err != nil {
		return sdk.ReadTextFileResponse{}, err
	}
	input := map[string]any{"path": path}
	if req.Line != nil {
		input["line"] = *req.Line
	}
	if req.Limit != nil {
		input["limit"] = *req.Limit
	}
	if !c.permit(sdk.ToolKindRead, governance.Clean("Read "+path, governance.MaxTitle), path, input) {
		return sdk.ReadTextFileResponse{}, errDenied("reading", req.Path)
	}
	content, err := readText(path, req.Line, req.Limit)
	if err != nil {
		return sdk.ReadTextFileResponse{}, sdk.NewInvalidParams(map[string]any{"path": req.Path, "reason": err.Error()})
	}
	return sdk.ReadTextFileResponse{Content: content}, nil
}

func (c *client) WriteTextFile(_ context.Context, req sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	if len(req.Content) > maxFileBytes {
		return sdk.WriteTextFileResponse{}, sdk.NewInvalidParams(map[string]any{"path": req.Path, "reason": fmt.Sprintf("content larger than %d bytes", maxFileBytes)})
	}
	path, err := jail(c.root, req.Path, true)
	if err != nil {
		return sdk.WriteTextFileResponse{}, err
	}
	input := map[string]any{"path": path, "content": req.Content}
	if !c.permit(sdk.ToolKindEdit, governance.Clean("Write "+path, governance.MaxTitle), path, input) {
		return sdk.WriteTextFileResponse{}, errDenied("writing", req.Path)
	}
	if err := writeText(path, req.Content); err != nil {
		return sdk.WriteTextFileResponse{}, sdk.NewInvalidParams(map[string]any{"path": req.Path, "reason": err.Error()})
	}
	return sdk.WriteTextFileResponse{}, nil
}

// readText returns the text of file path from line (1-based; nil: the
// first) for limit lines (nil: all), refusing a file larger than
// maxFileBytes. The file is opened without following a symlink put there
// since it was checked.
func readText(path string, line, limit *int) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", errors.New("cannot open the file")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	switch {
	case err != nil:
		return "", errors.New("cannot read the file")
	case len(b) > maxFileBytes:
		return "", fmt.Errorf("file larger than %d bytes", maxFileBytes)
	}
	if line == nil && limit == nil {
		return string(b), nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	from := 0
	if line != nil {
		from = min(max(*line-1, 0), len(lines))
	}
	to := len(lines)
	if limit != nil {
		to = min(from+max(*limit, 0), len(lines))
	}
	return strings.Join(lines[from:to], ""), nil
}

// writeText writes content to file path, creating it (mode 0644) or
// truncating it, without following a symlink put there since it was
// checked.
func writeText(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return errors.New("cannot open the file for writing")
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return errors.New("cannot write the file")
	}
	if err := f.Close(); err != nil {
		return errors.New("cannot write the file")
	}
	return nil
}
