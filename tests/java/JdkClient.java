// The JDK's own java.net.http client at its defaults, as LangChain4j uses it: on an
// http:// URL it offers an upgrade to HTTP/2 (Connection: Upgrade, HTTP2-Settings;
// Upgrade: h2c) and sends the body after the head.
//
// Run by tests/e2e/test_java_client_e2e.py with the source launcher:
//   java JdkClient.java BASE_URL KEY < requests
// Each line of stdin is a request: "METHOD<TAB>PATH<TAB>BODY" (BODY may be empty). Each
// request is made by a new client, so each one offers the upgrade on a new connection,
// then all of them again by one client that keeps its connections. For each answer it
// prints "STATUS VERSION LENGTH", a newline, then the body (LENGTH UTF-8 bytes).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

public class JdkClient {
    public static void main(String[] args) throws Exception {
        String base = args[0];
        String key = args[1];
        List<String[]> requests = new ArrayList<>();
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = input.readLine()) != null; ) {
            if (!line.isEmpty()) {
                requests.add(line.split("\t", 3));
            }
        }
        for (String[] request : requests) {
            send(HttpClient.newHttpClient(), base, key, request);
        }
        HttpClient shared = HttpClient.newHttpClient();
        for (String[] request : requests) {
            send(shared, base, key, request);
        }
    }

    static void send(HttpClient client, String base, String key, String[] request) throws Exception {
        String body = request.length > 2 ? request[2] : "";
        HttpRequest.Builder builder = HttpRequest.newBuilder(URI.create(base + request[1]))
                .timeout(Duration.ofSeconds(30))
                .header("Authorization", "Bearer " + key)
                .header("Content-Type", "application/json");
        if (body.isEmpty()) {
            builder.method(request[0], HttpRequest.BodyPublishers.noBody());
        } else {
            builder.method(request[0], HttpRequest.BodyPublishers.ofString(body));
        }
        HttpResponse<byte[]> response = client.send(builder.build(), HttpResponse.BodyHandlers.ofByteArray());
        byte[] answer = response.body();
        System.out.print(response.statusCode() + " " + response.version() + " " + answer.length + "\n");
        System.out.write(answer);
        System.out.print("\n");
        System.out.flush();
    }
}
