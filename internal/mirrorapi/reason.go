package mirrorapi

import "github.com/kmirror/kmirror/internal/reason"

// ReasonCode is the stable code of a partition's reason or a topic's error
// (package reason lists them, and the troubleshooting guide has a section
// for each); programs compare it, people read the message next to it.
type ReasonCode = reason.Code
