<?php
/*
 * Drives the original pzq's own PHP client (php-api/PZQClient.php of the original
 * pzq, used unchanged) for tests/integration/test_php_client.py. Only the client's
 * public API is called, as its producer.php, consumer.php and monitor.php examples
 * call it.
 *
 *   php php_client_driver.php PHP-API-FOLDER COMMAND < JSON-REQUEST
 *
 * Every byte string goes in and out as hex (message ids, parts, peers). Each result
 * is one JSON line on stdout; a step that fails writes {"error": ...} and the
 * driver exits 3. Commands:
 *
 *   produce  {"dsn", "messages": [{"id" (or null), "parts": [hex...], "one_part": bool,
 *                                  "timeout_ms" (this one's, optional)}],
 *             "timeout_ms", "ignore_ack", "connect_later", "keep_going"}
 *      one line per message: {"produced": id} or {"id", "error": the client's
 *      exception}; the first error ends the run unless "keep_going".
 *   consume  {"dsn", "count" or "want": [hex...], "ack": "1" | "0" | "none",
 *             "again": bool, "filter_expired": bool, "deadline_ms", "stale_ms"}
 *      one line per message received: {"id", "sent", "ack_timeout", "parts", "peer",
 *      "expired", "round"}, until "count" messages came or, given "want", until a
 *      message came with each of those first parts; each ACKed with "ack" ("0": a
 *      failure, "none": no ACK). With "again", the consumer goes on until each of
 *      those came a second time (round 2), and ACKs those.
 *      "stale_ms": wait that long after connecting before the first consume() (a
 *      consumer that was slow: its deliveries age in its socket); "work_ms": that
 *      long on each message before its ACK.
 *   monitor  {"dsn"}  one line: get_stats() as it answers
 */

error_reporting (E_ALL);
ini_set ('display_errors', 'stderr');

// A warning or notice from the client (an undefined index, say) is a failure too.
set_error_handler (function ($severity, $text, $file, $line) {
    throw new ErrorException ($text, 0, $severity, $file, $line);
});

if ($argc != 3) {
    fwrite (STDERR, "usage: php php_client_driver.php PHP-API-FOLDER COMMAND < JSON-REQUEST\n");
    exit (2);
}
require rtrim ($argv [1], '/') . '/PZQClient.php';

function say ($line)
{
    echo json_encode ($line), PHP_EOL;
}

function fail ($why)
{
    say (array ('error' => $why));
    exit (3);
}

function produce ($request)
{
    if (!empty ($request ['connect_later'])) {
        $producer = new PZQProducer ();
        $producer->connect ($request ['dsn']);
    } else {
        $producer = new PZQProducer ($request ['dsn']);
    }
    $producer->set_ignore_ack (!empty ($request ['ignore_ack']));

    foreach ($request ['messages'] as $wanted) {
        $parts = array_map ('hex2bin', $wanted ['parts']);
        $message = new PZQMessage ();
        if ($wanted ['id'] !== null)  // without set_id () the id is null: an empty frame
            $message->set_id (hex2bin ($wanted ['id']));
        $message->set_message (empty ($wanted ['one_part']) ? $parts : $parts [0]);
        try {
            $producer->produce ($message, isset ($wanted ['timeout_ms'])
                                          ? $wanted ['timeout_ms'] : $request ['timeout_ms']);
        } catch (PZQClientException $e) {
            say (array ('id' => $wanted ['id'], 'error' => $e->getMessage ()));
            if (empty ($request ['keep_going']))
                exit (3);
            continue;  // a producer that goes on with its next message
        }
        say (array ('produced' => $wanted ['id']));
    }
}

function delivery (PZQConsumer $consumer, PZQMessage $message, $round)
{
    return array (
        'id' => bin2hex ($message->get_id ()),
        'sent' => $message->get_sent_time (),
        'ack_timeout' => $message->get_ack_timeout (),
        'parts' => array_map ('bin2hex', $message->get_message ()),
        'peer' => bin2hex ($message->get_peer ()),
        'expired' => $consumer->is_expired ($message),
        'round' => $round,
    );
}

// consume(false) until a message comes (the client's own call, not blocking, so
// that a test never waits past its deadline).
function next_message (PZQConsumer $consumer, $deadline)
{
    while (microtime (true) < $deadline) {
        $message = $consumer->consume (false);
        if ($message !== false)
            return $message;
        usleep (2000);
    }
    fail ('deadline: no message came');
}

function consume ($request)
{
    $consumer = new PZQConsumer ();
    $consumer->connect ($request ['dsn']);
    $consumer->set_filter_expired ($request ['filter_expired']);
    $deadline = microtime (true) + $request ['deadline_ms'] / 1000;
    if (!empty ($request ['stale_ms']))
        usleep ($request ['stale_ms'] * 1000);

    $first = array ();
    $wanted = array_flip (isset ($request ['want']) ? $request ['want'] : array ());
    $count = isset ($request ['want']) ? 0 : $request ['count'];
    while (count ($first) < $count || count ($wanted) > 0) {
        $message = next_message ($consumer, $deadline);
        say (delivery ($consumer, $message, 1));
        $first [$message->get_id ()] = true;
        $body = $message->get_message ();
        if (count ($body) > 0)
            unset ($wanted [bin2hex ($body [0])]);
        if (!empty ($request ['work_ms']))
            usleep ($request ['work_ms'] * 1000);  // a consumer's work on each message
        if ($request ['ack'] != 'none')
            $consumer->ack ($message, $request ['ack'] == '1');
    }
    if (!empty ($request ['again'])) {
        $again = array ();
        while (count ($again) < count ($first)) {
            $message = next_message ($consumer, $deadline);
            $key = $message->get_id ();
            say (delivery ($consumer, $message, isset ($first [$key]) ? 2 : 1));
            if (isset ($first [$key]))
                $again [$key] = true;
            $consumer->ack ($message);
        }
    }
}

function monitor ($request)
{
    $monitor = new PZQMonitor ($request ['dsn']);
    say ($monitor->get_stats ());
}

$request = json_decode (stream_get_contents (STDIN), true);
switch ($argv [2]) {
    case 'produce':
        produce ($request);
        break;
    case 'consume':
        consume ($request);
        break;
    case 'monitor':
        monitor ($request);
        break;
    default:
        fwrite (STDERR, "unknown command {$argv [2]}\n");
        exit (2);
}
