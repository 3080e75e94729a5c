"""What the tests of every tier share: real processes (procs, profiling_procs), floods and
attacks, fakes of absent hardware and services, and helpers several test modules use."""
