# slow_clients.pl PORT PER_ADDRESS SECONDS READY: slow HTTP clients for
# t_serve.sh. Opens PER_ADDRESS connections to 127.0.0.1:PORT from each of
# 127.0.0.2 to 127.0.0.6 (a server limits connections per address), sends
# each a request line, then one header line every 3 s and never the blank
# line that ends the headers. Creates the file READY once all are open.
# After SECONDS it prints one line per connection: how long, in seconds
# from its opening, until the server closed it, or "open". One process,
# whatever PER_ADDRESS is (bash's /dev/tcp cannot choose a source address,
# and python3 may be missing).
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

my ($port, $per, $seconds, $ready) = @ARGV;
$SIG{PIPE} = 'IGNORE';    # a write to a closed connection fails instead
my (@conns, %by_fd, $warned);
for my $a (2 .. 6) {
    for (1 .. $per) {
        # A server at its limit leaves new connections in the kernel's
        # queue, where they open all the same; a full queue would not.
        my $s = IO::Socket::INET->new(
            PeerAddr  => '127.0.0.1',
            PeerPort  => $port,
            LocalAddr => "127.0.0.$a",
            Proto     => 'tcp',
            Timeout   => 2
        ) or do { warn "127.0.0.$a: $@\n" unless $warned++; next };
        my $c = {sock => $s, opened => time, closed => undef};
        push @conns, $c;
        $by_fd{fileno $s} = $c;
        syswrite($s, "GET / HTTP/1.1\r\n") or $c->{closed} = time;
    }
}
open(my $f, '>', $ready) or die "$ready: $!";
close $f;

my $sel = IO::Select->new(map { $_->{sock} } grep { !$_->{closed} } @conns);
my $start = time;
my ($next, $n) = ($start + 3, 0);
sub closed {
    my ($c) = @_;
    $c->{closed} = time;
    $sel->remove($c->{sock});
    close $c->{sock};
}
while ((my $now = time) < $start + $seconds) {
    if ($now >= $next) {
        $n++;
        for my $c (grep { !$_->{closed} } @conns) {
            syswrite($c->{sock}, "X-Slow-$n: 1\r\n") or closed($c);
        }
        $next += 3;
    }
    my $wait = ($next < $start + $seconds ? $next : $start + $seconds) - time;
    for my $s ($sel->can_read($wait > 0 ? $wait : 0)) {
        my $c = $by_fd{fileno $s};
        my $got = sysread($s, my $buf, 4096);
        closed($c) if !$got;    # the end of the stream, or an error
    }
}
for my $c (@conns) {
    print defined $c->{closed} ? sprintf("%.2f\n", $c->{closed} - $c->{opened}) : "open\n";
}
