package delegate

import (
	"fmt"
	"strings"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Model-visible texts of the delegation tool (docs/seam.md §23). The tests pin
// them; change them together with docs/seam.md §23.
const (
	headlineAborted   = "subagent run was cancelled"
	headlineError     = "subagent run failed"
	headlineMaxTokens = "subagent run hit its token limit before finishing"
	headlineRefusal   = "subagent declined the task"

	descriptionParam = "A short (3-5 word) description of the task, shown to the user."

	freshDescription = "Delegate a self-contained task to a separate agent that works in its own context. " +
		"Only its result comes back, without its intermediate steps. " +
		"It does not see this conversation, so give it a complete, standalone prompt."
	freshPrompt = "The complete task for the subagent. It does not see this conversation: " +
		"include everything it needs (facts, file paths, constraints, what to return)."

	forkDescription = "Delegate a task to an agent that inherits all completed turns of this conversation " +
		"(not the current, in-flight turn). Useful for follow-up analyses and reviews that build on the context so far. " +
		"Only its result comes back, without its intermediate steps."
	forkPrompt = "The task for the subagent. It already sees the completed turns of this conversation, " +
		"so give only the new information and instructions it needs."

	continuableSuffix = " It runs in the background by default: the call returns a durable subagent id at once " +
		"and this conversation stays available. When the run settles, the runtime sends you a notice with its " +
		"outcome and any closing message. Use send_message to give it a later turn. Set run_in_background to " +
		"false only when your next action depends on the result."
	foregroundSuffix = " The call waits and returns the result."

	backgroundParam = "Defaults to true: the subagent runs in the background and the call returns its id at once. " +
		"Set false to wait for the result."
)

// Headline returns the first line of the isError result of a foreground run
// that ended with reason (docs/seam.md §23); an unknown reason reads
// "subagent run ended abnormally (<reason>)". Completed has no headline.
func Headline(reason string) string {
	switch reason {
	case subagent.StopAborted:
		return headlineAborted
	case subagent.StopError:
		return headlineError
	case subagent.StopMaxTokens:
		return headlineMaxTokens
	case subagent.StopRefusal:
		return headlineRefusal
	}
	return fmt.Sprintf("subagent run ended abnormally (%s)", reason)
}

// FailureText is the isError message of a non-completed foreground run
// (docs/seam.md §23): the headline, then "\nDiagnostic: <d>" when there is a
// diagnostic, then "\nPartial output before the run ended:\n<text>" when the
// output has text.
func FailureText(r subagent.Result) string {
	var b strings.Builder
	b.WriteString(Headline(r.StopReason))
	if r.Diagnostic != "" {
		b.WriteString("\nDiagnostic: ")
		b.WriteString(r.Diagnostic)
	}
	if text := model.Text(r.Output); text != "" {
		b.WriteString("\nPartial output before the run ended:\n")
		b.WriteString(text)
	}
	return b.String()
}

// toolDescription derives the delegation tool's wording from the provider
// (R8): whether the child inherits the parent's context, and whether the
// tool can run children in the background.
func toolDescription(p subagent.Provider, background bool) (description, prompt string) {
	description, prompt = freshDescription, freshPrompt
	if p.InheritsParentContext() {
		description, prompt = forkDescription, forkPrompt
	}
	if d := strings.TrimSpace(p.Description()); d != "" {
		description += " Provider " + p.Name() + ": " + d
		if !strings.HasSuffix(description, ".") {
			description += "."
		}
	}
	if background {
		return description + continuableSuffix, prompt
	}
	return description + foregroundSuffix, prompt
}
