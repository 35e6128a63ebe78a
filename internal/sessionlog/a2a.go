package sessionlog

// EventA2ATask records the remote task an A2A child's turn runs as, once
// the remote agent named it: the task a lost stream resubscribes to and a
// cancel names, and the context later turns continue. Readers skip types
// they do not know.
const EventA2ATask = "a2a/task"

// A2ATaskData is the payload of a2a/task.
type A2ATaskData struct {
	Turn      int    `json:"turn"`
	TaskID    string `json:"taskId"`
	ContextID string `json:"contextId,omitempty"`
}
