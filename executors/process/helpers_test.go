package process

import (
	"strconv"
	"syscall"
)

func itoa(n int) string { return strconv.Itoa(n) }

func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
