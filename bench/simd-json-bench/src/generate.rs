//! Deterministic stand-ins for the seven corpus documents, used when no
//! `--data` directory is given. Each has the structure of its namesake
//! (what kinds of values, how deep, how many keys per object, how long the
//! strings) and about its size, so the parsers make the same kinds of
//! allocations; the content is drawn from a seeded generator.

use devutils::Rng;

/// The corpus documents' names, in the order reported.
pub const NAMES: [&str; 7] = [
    "apache_builds",
    "canada",
    "citm_catalog",
    "event_stacktrace_10kb",
    "github_events",
    "log",
    "twitter",
];

/// Generates the stand-in for corpus document `name` (one of [`NAMES`]),
/// scaled: `scale` 1.0 is about the real document's size.
pub fn document(name: &str, scale: f64) -> Vec<u8> {
    let mut g = Gen {
        out: String::new(),
        rng: Rng::new(name.len() as u64 * 7919 + name.as_bytes()[0] as u64),
    };
    let target = |bytes: usize| ((bytes as f64 * scale) as usize).max(256);
    match name {
        "apache_builds" => g.apache_builds(target(127_000)),
        "canada" => g.canada(target(2_250_000)),
        "citm_catalog" => g.citm_catalog(target(1_700_000)),
        "event_stacktrace_10kb" => g.event_stacktrace(target(9_900)),
        "github_events" => g.github_events(target(65_000)),
        "log" => g.log(),
        "twitter" => g.twitter(target(630_000)),
        _ => panic!("no generator for {name}"),
    }
    g.out.into_bytes()
}

/// A JSON text under construction and the generator of its content.
struct Gen {
    out: String,
    rng: Rng,
}

/// Pieces for generated words: ASCII and some multi-byte UTF-8, as in the
/// real documents (French names in citm_catalog, Japanese tweets).
const SYLLABLES: [&str; 16] = [
    "ka", "ri", "to", "ne", "sa", "mo", "lu", "ve", "é", "è", "ção", "の", "日本", "ツ", "ß", "on",
];

impl Gen {
    fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// `"key":` (after a comma unless first in its object).
    fn key(&mut self, k: &str) {
        if !matches!(self.out.as_bytes().last(), Some(b'{') | None) {
            self.out.push(',');
        }
        self.out.push('"');
        self.out.push_str(k);
        self.out.push_str("\":");
    }

    /// A comma if the previous value in this array was not the first.
    fn sep(&mut self) {
        if !matches!(self.out.as_bytes().last(), Some(b'[') | None) {
            self.out.push(',');
        }
    }

    fn word(&mut self, min: u64, max: u64, ascii: bool) -> String {
        let n = self.rng.range(min, max);
        let mut w = String::new();
        for _ in 0..n {
            let pool = if ascii { 8 } else { SYLLABLES.len() as u64 };
            w.push_str(SYLLABLES[self.rng.below(pool) as usize]);
        }
        w
    }

    /// A string value of `words` words, with an escape now and then.
    fn text(&mut self, words: u64, ascii: bool) {
        self.out.push('"');
        for i in 0..words {
            if i > 0 {
                self.out.push(' ');
            }
            let w = self.word(1, 4, ascii);
            self.out.push_str(&w);
            if self.rng.chance(1, 16) {
                self.out.push_str("\\n");
            }
        }
        self.out.push('"');
    }

    fn url(&mut self, host: &str) {
        let a = self.word(2, 4, true);
        let b = self.word(1, 3, true);
        self.out.push_str(&format!("\"https://{host}/{a}/{b}\""));
    }

    fn int(&mut self, max: u64) {
        let v = self.rng.below(max);
        self.out.push_str(&v.to_string());
    }

    fn bool(&mut self) {
        let b = if self.rng.chance(1, 2) {
            "true"
        } else {
            "false"
        };
        self.raw(b);
    }

    fn hex(&mut self, digits: usize) {
        self.out.push('"');
        for _ in 0..digits {
            let d = self.rng.below(16) as u32;
            self.out.push(char::from_digit(d, 16).unwrap_or('0'));
        }
        self.out.push('"');
    }

    /// Jenkins' job list: one object with a long array of small objects.
    fn apache_builds(&mut self, target: usize) {
        self.raw("{");
        self.key("assignedLabels");
        self.raw("[{}]");
        self.key("mode");
        self.raw("\"EXCLUSIVE\"");
        self.key("nodeDescription");
        self.text(4, true);
        self.key("numExecutors");
        self.int(8);
        self.key("jobs");
        self.raw("[");
        while self.out.len() < target {
            self.sep();
            self.raw("{");
            self.key("name");
            self.text(1, true);
            self.key("url");
            self.url("builds.apache.org/job");
            self.key("color");
            let color = if self.rng.chance(3, 4) {
                "\"blue\""
            } else {
                "\"red\""
            };
            self.raw(color);
            self.raw("}");
        }
        self.raw("]");
        self.key("useSecurity");
        self.raw("true");
        self.raw("}");
    }

    /// GeoJSON: rings of [longitude, latitude] pairs, floats of 15+ digits.
    fn canada(&mut self, target: usize) {
        self.raw("{\"type\":\"FeatureCollection\",\"features\":[{\"type\":\"Feature\",");
        self.raw("\"properties\":{\"name\":\"Canada\"},\"geometry\":{\"type\":\"Polygon\",");
        self.raw("\"coordinates\":[");
        while self.out.len() < target {
            self.sep();
            self.raw("[");
            let points = self.rng.range(16, 2048);
            for _ in 0..points {
                self.sep();
                let lon = -141.0 + self.rng.below(1 << 40) as f64 / (1u64 << 40) as f64 * 88.0;
                let lat = 41.0 + self.rng.below(1 << 40) as f64 / (1u64 << 40) as f64 * 42.0;
                self.out.push_str(&format!("[{lon:.15},{lat:.15}]"));
            }
            self.raw("]");
        }
        self.raw("]}}]}");
    }

    /// A ticketing catalog: maps keyed by numeric ids, arrays of integers,
    /// many nulls, nested price and seat objects.
    fn citm_catalog(&mut self, target: usize) {
        self.raw("{");
        self.key("areaNames");
        self.raw("{");
        for _ in 0..20 {
            let id = 205_705_000 + self.rng.below(1000);
            self.key(&id.to_string());
            self.text(2, false);
        }
        self.raw("}");
        self.key("events");
        self.raw("{");
        for _ in 0..180 {
            let id = 138_586_000 + self.rng.below(100_000);
            self.key(&id.to_string());
            self.raw("{");
            self.key("description");
            self.raw("null");
            self.key("id");
            self.raw(&id.to_string());
            self.key("name");
            self.text(3, false);
            self.key("subTopicIds");
            self.int_array(2, 5, 337_184_000, 1000);
            self.key("topicIds");
            self.int_array(1, 3, 107_888_000, 1000);
            self.raw("}");
        }
        self.raw("}");
        self.key("performances");
        self.raw("[");
        while self.out.len() < target {
            self.sep();
            self.raw("{");
            self.key("eventId");
            self.int(200_000_000);
            self.key("logo");
            self.raw("null");
            self.key("prices");
            self.raw("[");
            for _ in 0..self.rng.range(1, 4) {
                self.sep();
                self.raw("{");
                self.key("amount");
                self.int(200_000);
                self.key("audienceSubCategoryId");
                self.int(400_000_000);
                self.key("seatCategoryId");
                self.int(400_000_000);
                self.raw("}");
            }
            self.raw("]");
            self.key("seatCategories");
            self.raw("[");
            for _ in 0..self.rng.range(1, 4) {
                self.sep();
                self.raw("{");
                self.key("areas");
                self.raw("[");
                for _ in 0..self.rng.range(1, 8) {
                    self.sep();
                    self.raw("{");
                    self.key("areaId");
                    self.int(300_000_000);
                    self.key("blockIds");
                    self.raw("[]");
                    self.raw("}");
                }
                self.raw("]");
                self.key("seatCategoryId");
                self.int(400_000_000);
                self.raw("}");
            }
            self.raw("]");
            self.key("start");
            self.int(1_400_000_000_000);
            self.key("venueCode");
            self.raw("\"PLEYEL_PLEYEL\"");
            self.raw("}");
        }
        self.raw("]}");
    }

    fn int_array(&mut self, min: u64, max: u64, base: u64, spread: u64) {
        self.raw("[");
        for _ in 0..self.rng.range(min, max) {
            self.sep();
            let v = base + self.rng.below(spread);
            self.raw(&v.to_string());
        }
        self.raw("]");
    }

    /// A structured log event with an exception: long strings with escapes,
    /// a few nested objects.
    fn event_stacktrace(&mut self, target: usize) {
        self.raw("{");
        self.key("@t");
        self.raw("\"2020-02-07T19:34:57.3431468Z\"");
        self.key("@mt");
        self.text(12, false);
        self.key("@l");
        self.raw("\"Error\"");
        self.key("@x");
        self.out.push('"');
        while self.out.len() + 400 < target {
            let w = self.word(3, 8, true);
            self.out
                .push_str(&format!("   at System.{w}.Connect(EndPoint remoteEP)\\n"));
        }
        self.out.push('"');
        for k in ["ActionId", "ActionName", "RequestId", "RequestPath"] {
            self.key(k);
            self.text(3, true);
        }
        self.key("EventId");
        self.raw("{\"Id\":13,\"Name\":\"ApplicationError\"}");
        self.raw("}");
    }

    /// GitHub's event feed: an array of mid-sized nested objects.
    fn github_events(&mut self, target: usize) {
        self.raw("[");
        while self.out.len() < target {
            self.sep();
            self.raw("{");
            self.key("type");
            self.raw("\"PushEvent\"");
            self.key("created_at");
            self.raw("\"2013-01-10T07:58:11Z\"");
            self.key("actor");
            self.raw("{");
            self.key("gravatar_id");
            self.hex(32);
            self.key("login");
            self.text(1, true);
            self.key("avatar_url");
            self.url("secure.gravatar.com/avatar");
            self.key("id");
            self.int(10_000_000);
            self.raw("}");
            self.key("repo");
            self.raw("{");
            self.key("id");
            self.int(10_000_000);
            self.key("url");
            self.url("api.github.com/repos");
            self.key("name");
            self.text(1, true);
            self.raw("}");
            self.key("public");
            self.bool();
            self.key("payload");
            self.raw("{");
            self.key("commits");
            self.raw("[");
            for _ in 0..self.rng.range(1, 4) {
                self.sep();
                self.raw("{");
                self.key("sha");
                self.hex(40);
                self.key("author");
                self.raw("{");
                self.key("email");
                self.text(1, true);
                self.key("name");
                self.text(2, true);
                self.raw("}");
                self.key("url");
                self.url("api.github.com/repos");
                self.key("message");
                let words = self.rng.range(3, 30);
                self.text(words, true);
                self.raw("}");
            }
            self.raw("]");
            self.key("ref");
            self.raw("\"refs/heads/master\"");
            self.key("size");
            self.int(10);
            self.key("push_id");
            self.int(200_000_000);
            self.raw("}");
            self.key("id");
            self.hex(10);
            self.raw("}");
        }
        self.raw("]");
    }

    /// A small flat log record (about 2 KB): one object, string values,
    /// one long string with many escaped newlines.
    fn log(&mut self) {
        self.raw("{");
        for i in 0..24 {
            self.key(&format!("field_{i}"));
            if i % 5 == 0 {
                self.int(2_000_000_000);
            } else {
                self.text(3, true);
            }
        }
        self.key("slush");
        self.out.push('"');
        for i in 0..90 {
            let w = self.word(1, 3, true);
            self.out
                .push_str(&format!("{w}_{i}={}\\n", self.rng.below(100_000)));
        }
        self.out.push('"');
        self.raw("}");
    }

    /// Twitter's search API: statuses with large user objects, entities and
    /// non-ASCII text.
    fn twitter(&mut self, target: usize) {
        self.raw("{");
        self.key("statuses");
        self.raw("[");
        while self.out.len() < target {
            self.sep();
            self.raw("{");
            self.key("metadata");
            self.raw("{\"result_type\":\"recent\",\"iso_language_code\":\"ja\"}");
            self.key("created_at");
            self.raw("\"Sun Aug 31 00:29:15 +0000 2014\"");
            self.key("id");
            self.int(1 << 60);
            self.key("id_str");
            self.hex(18);
            self.key("text");
            let words = self.rng.range(4, 20);
            self.text(words, false);
            self.key("truncated");
            self.raw("false");
            self.key("in_reply_to_status_id");
            self.raw("null");
            self.key("user");
            self.twitter_user();
            self.key("entities");
            self.raw("{");
            self.key("hashtags");
            self.raw("[]");
            self.key("user_mentions");
            self.raw("[");
            for _ in 0..self.rng.range(0, 3) {
                self.sep();
                self.raw("{");
                self.key("screen_name");
                self.text(1, true);
                self.key("name");
                self.text(2, false);
                self.key("id");
                self.int(1 << 40);
                self.key("indices");
                self.int_array(2, 2, 0, 140);
                self.raw("}");
            }
            self.raw("]");
            self.raw("}");
            self.key("retweet_count");
            self.int(1000);
            self.key("favorited");
            self.bool();
            self.key("lang");
            self.raw("\"ja\"");
            self.raw("}");
        }
        self.raw("]");
        self.key("search_metadata");
        self.raw("{\"completed_in\":0.087,\"max_id\":505874924095815681,\"count\":100}");
        self.raw("}");
    }

    fn twitter_user(&mut self) {
        self.raw("{");
        self.key("id");
        self.int(1 << 40);
        self.key("name");
        self.text(2, false);
        self.key("screen_name");
        self.text(1, true);
        self.key("location");
        self.text(1, false);
        self.key("description");
        let words = self.rng.range(2, 16);
        self.text(words, false);
        self.key("url");
        self.raw("null");
        self.key("protected");
        self.bool();
        for k in ["followers_count", "friends_count", "listed_count"] {
            self.key(k);
            self.int(100_000);
        }
        self.key("created_at");
        self.raw("\"Sun Jan 03 12:12:06 +0000 2010\"");
        for k in ["profile_background_color", "profile_link_color"] {
            self.key(k);
            self.hex(6);
        }
        for k in ["profile_image_url", "profile_image_url_https"] {
            self.key(k);
            self.url("pbs.twimg.com/profile_images");
        }
        self.key("default_profile");
        self.bool();
        self.key("following");
        self.raw("false");
        self.raw("}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_is_valid_json_of_about_its_size() {
        for name in NAMES {
            let doc = document(name, 0.05);
            let v: serde_json::Value = serde_json::from_slice(&doc)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{}", String::from_utf8_lossy(&doc)));
            assert!(v.is_object() || v.is_array(), "{name}");
            assert_eq!(doc, document(name, 0.05), "{name} is deterministic");
        }
        let full = document("twitter", 1.0).len();
        assert!((600_000..700_000).contains(&full), "twitter: {full} bytes");
    }
}
