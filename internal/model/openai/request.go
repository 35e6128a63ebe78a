package openai

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/subagentd/subagentd/internal/model"
)

// params maps req onto Chat Completions parameters. Only text blocks are
// sent; other block types have no Chat Completions form here. It returns an
// error when no model name is known or a message or tool cannot be mapped.
func (m *Model) params(req model.Request) (sdk.ChatCompletionNewParams, error) {
	name := cmp.Or(req.Model, m.defaultModel)
	if name == "" {
		return sdk.ChatCompletionNewParams{}, errors.New("model request has no model name and the route has no default model")
	}
	p := sdk.ChatCompletionNewParams{
		Model:         name,
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		mp, err := message(msg)
		if err != nil {
			return sdk.ChatCompletionNewParams{}, fmt.Errorf("model request message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	for _, t := range req.Tools {
		tp, err := tool(t)
		if err != nil {
			return sdk.ChatCompletionNewParams{}, err
		}
		p.Tools = append(p.Tools, tp)
	}
	if req.MaxTokens > 0 {
		if m.completionTokens {
			p.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
		} else {
			p.MaxTokens = param.NewOpt(int64(req.MaxTokens))
		}
	}
	return p, nil
}

// message maps one history entry. A tool result's IsError has no Chat
// Completions field; its text is expected to say what went wrong.
func message(msg model.Message) (sdk.ChatCompletionMessageParamUnion, error) {
	text := model.Text(msg.Content)
	switch msg.Role {
	case model.RoleUser:
		return sdk.UserMessage(text), nil
	case model.RoleAssistant:
		var a sdk.ChatCompletionAssistantMessageParam
		if text != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(text)
		}
		for _, tc := range msg.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: cmp.Or(tc.Arguments, "{}"),
					},
				},
			})
		}
		return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	case model.RoleTool:
		if msg.ToolCallID == "" {
			return sdk.ChatCompletionMessageParamUnion{}, errors.New("tool result has no tool call id")
		}
		return sdk.ToolMessage(text, msg.ToolCallID), nil
	default:
		return sdk.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// tool maps a tool onto a function definition.
func tool(t model.ToolSpec) (sdk.ChatCompletionToolUnionParam, error) {
	def := shared.FunctionDefinitionParam{Name: t.Name}
	if t.Description != "" {
		def.Description = param.NewOpt(t.Description)
	}
	if len(t.Parameters) > 0 {
		// Plain float64 numbers: the SDK's encoder writes a json.Number as a
		// string.
		if err := json.Unmarshal(t.Parameters, &def.Parameters); err != nil || def.Parameters == nil {
			return sdk.ChatCompletionToolUnionParam{}, fmt.Errorf("tool %q: parameters must be a JSON Schema object", t.Name)
		}
	}
	return sdk.ChatCompletionFunctionTool(def), nil
}
